"""Retry lines for SLURM job arrays, compatible with NeMo Curator's ``retry_array.py``.

A shardwise run can be driven outside Snakemake by a plain ``sbatch --array`` script that
runs ``shardwise classify-shard --shard $((SLURM_ARRAY_TASK_ID + SHARD_INDEX_OFFSET))``.
After a partial run, this module lists what to resubmit, in the exact format of
NeMo Curator's ``retry_array.py`` so existing submit scripts keep working:

* ``expression``: one line, the range expression of the missing shard numbers.
* ``fields``: one line per submission,
  ``ARRAY_EXPRESSION SHARD_INDEX_OFFSET MINIMUM_SHARD_INDEX TOTAL_SHARDS``.
  Without a maximum array size there is one line with offset 0 and the shard numbers
  themselves as array indices. With ``max_array_size=M`` (SLURM's ``MaxArraySize`` caps
  the array *index*, not the count) each missing shard ``s`` goes to the window
  ``offset = s // M * M`` with array index ``s - offset``; one line per window, windows
  ascending.

Shard numbers are absolute (``minimum .. minimum + total - 1``), never relative to the
minimum: ``total 4, min 1, done {1, 3}`` gives ``2,4 0 1 4``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from shardwise.run import ranges, state

__all__ = ["Format", "Retry", "missing_shards", "retry", "retry_lines"]

Format = Literal["expression", "fields"]


def retry_lines(
    missing: Iterable[int],
    *,
    total_shards: int,
    minimum_shard_index: int,
    max_array_size: int | None = None,
    fmt: Format = "expression",
) -> list[str]:
    """Return the lines to print for ``missing`` shards; ``[]`` when nothing is missing.

    Raises ``ValueError`` for a shard outside the run's range (a marker from another
    run would otherwise produce a submission that classifies the wrong shard), for a
    non-positive ``max_array_size``, and for ``max_array_size`` with the expression
    format (a bare expression cannot carry the offset, so the windows would be lost).
    """
    if total_shards <= 0:
        raise ValueError(f"total_shards must be positive, got {total_shards}")
    if max_array_size is not None and max_array_size <= 0:
        raise ValueError(f"max_array_size must be positive, got {max_array_size}")
    if max_array_size is not None and fmt != "fields":
        raise ValueError("max_array_size needs fmt='fields' (the offset is a field)")
    if fmt not in ("expression", "fields"):
        raise ValueError(f"unknown format {fmt!r}")
    shards = sorted(set(missing))
    last = minimum_shard_index + total_shards - 1
    outside = [s for s in shards if not minimum_shard_index <= s <= last]
    if outside:
        raise ValueError(
            f"shards {ranges.compress(outside)} are outside {minimum_shard_index}-{last}"
        )
    if not shards:
        return []
    tail = f"{minimum_shard_index} {total_shards}"
    if fmt == "expression":
        return [ranges.compress(shards)]
    if max_array_size is None:
        return [f"{ranges.compress(shards)} 0 {tail}"]
    windows: dict[int, list[int]] = {}
    for shard in shards:
        offset = shard // max_array_size * max_array_size
        windows.setdefault(offset, []).append(shard - offset)
    return [f"{ranges.compress(idx)} {offset} {tail}" for offset, idx in sorted(windows.items())]


def missing_shards(
    done: Iterable[int], *, total_shards: int, minimum_shard_index: int
) -> list[int]:
    """Shards of the run's range ``minimum .. minimum + total - 1`` not in ``done``.

    Done shards outside the range are ignored: they belong to another assignment and
    say nothing about this one.
    """
    done_set = set(done)
    return [
        s
        for s in range(minimum_shard_index, minimum_shard_index + total_shards)
        if s not in done_set
    ]


@dataclass(frozen=True)
class Retry:
    """What to resubmit, and what a reader of the lines should know besides."""

    lines: tuple[str, ...]
    unreadable: tuple[int, ...]  # shard markers that vouch for nothing (not done)
    stale: tuple[int, ...]  # shard markers of another assignment (not done)
    quarantined: int  # files left out of the run: nothing to retry for them


def retry(run_dir: Path, *, fmt: Format, max_array_size: int | None) -> Retry:
    """The retry lines of the run in ``run_dir``: its shards not done, in the one meaning
    coverage and domains use (``run/state.py``)."""
    run = state.load(run_dir)
    lines = retry_lines(
        missing_shards(
            run.done.shards,
            total_shards=run.meta.total_shards,
            minimum_shard_index=run.meta.minimum_shard_index,
        ),
        total_shards=run.meta.total_shards,
        minimum_shard_index=run.meta.minimum_shard_index,
        max_array_size=max_array_size,
        fmt=fmt,
    )
    return Retry(tuple(lines), run.done.unreadable, run.done.stale, len(run.quarantined))
