"""Retry lines for SLURM job arrays, in the format of NeMo Curator's ``retry_array.py``:
``expression`` (one range expression) or ``fields`` (``ARRAY_EXPRESSION SHARD_INDEX_OFFSET
MINIMUM_SHARD_INDEX TOTAL_SHARDS``, one window per ``max_array_size``); absolute shards."""

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from shardwise.run import opened, ranges
from shardwise.run.sharding import shard_range

Format = Literal["expression", "fields"]


def retry_lines(
    missing: Iterable[int],
    *,
    total_shards: int,
    minimum_shard_index: int,
    max_array_size: int | None = None,
    fmt: Format = "expression",
) -> list[str]:
    """The lines to print for ``missing`` shards (``[]``: none). ValueError for a shard
    outside the range (it would classify the wrong shard), a non-positive
    ``max_array_size``, or one with the expression format (which cannot carry offsets)."""
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
        msg = f"shards {ranges.compress(outside)} are outside {minimum_shard_index}-{last}"
        raise ValueError(msg)
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
    """Shards of the run's range not in ``done`` (done shards outside it, of another
    assignment, say nothing of this one)."""
    done_set = set(done)
    return [s for s in shard_range(total_shards, minimum_shard_index) if s not in done_set]


@dataclass(frozen=True)
class Retry:
    """What to resubmit, and what a reader of the lines should know besides."""

    lines: tuple[str, ...]
    unreadable: tuple[int, ...]  # shard markers that vouch for nothing (not done)
    stale: tuple[int, ...]  # shard markers of another assignment (not done)
    quarantined: int  # files left out of the run: nothing to retry for them


def retry(run_dir: Path, *, fmt: Format, max_array_size: int | None) -> Retry:
    """The retry lines of the run in ``run_dir``: its shards not done, in the one meaning
    coverage and domains use (``run/opened.py``)."""
    run = opened.open_run(run_dir, settings_required=False)
    meta = run.meta
    pinned = {"total_shards": meta.total_shards, "minimum_shard_index": meta.minimum_shard_index}
    missing = missing_shards(run.done.shards, **pinned)
    lines = retry_lines(missing, **pinned, max_array_size=max_array_size, fmt=fmt)
    return Retry(tuple(lines), run.done.unreadable, run.done.stale, len(run.quarantined))
