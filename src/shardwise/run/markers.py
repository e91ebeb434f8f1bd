"""``.done`` markers: the only proof that work is complete, so always written last.

Per source file, ``<output>/<rel>.done`` vouches that the sidecar and stats beside
it are whole; per logical shard, ``<run_dir>/shards/<shard>.done`` (the Snakemake
target) vouches that every file of the shard has its marker. For object-store
outputs the planner also keeps ``<run_dir>/output-markers.txt``, the file markers
its one listing found, so jobs need not ask for each marker.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shardwise.store.atomic import json_bytes, write_atomic
from shardwise.store.location import Location

FILE_MARKER_SUFFIX = ".done"
SHARDS_DIR = "shards"
#: Files with an output marker at plan time (object-store outputs only).
OUTPUT_MARKERS = "output-markers.txt"


def file_marker_rel(rel: str) -> str:
    """Relative path (under the output root) of the marker of source file ``rel``."""
    return rel + FILE_MARKER_SUFFIX


def source_of_marker(marker_rel: str) -> str:
    """The source file a marker vouches for."""
    return marker_rel.removesuffix(FILE_MARKER_SUFFIX)


def file_marker(
    rel: str, task_id: str, shard: int, rows: int, identity: str | None = None
) -> bytes:
    """Content of a file marker (``identity``: the source's, as planned; see plan.identity)."""
    body: dict[str, Any] = {
        "file": rel,
        "task_id": task_id,
        "shard": shard,
        "rows": rows,
        "finished_at": now(),
    }
    if identity is not None:
        body["source_identity"] = identity
    return json_bytes(body)


def shard_marker_path(run_dir: Path, shard: int) -> Path:
    """The Snakemake target of ``shard``."""
    return Path(run_dir) / SHARDS_DIR / f"{shard}{FILE_MARKER_SUFFIX}"


def write_shard_marker(
    run_dir: Path,
    shard: int,
    *,
    total_shards: int,
    minimum_shard_index: int,
    tasks: int,
    files: int,
    docs: int | None,
    source: str = "job",
    quarantined: int = 0,
    file_stats: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Mark ``shard`` done (atomically). ``source`` says who decided: job, empty, remote.

    ``docs`` is None when the shard was finished elsewhere and its count is unknown here;
    ``quarantined`` counts the shard's files left out of the run (recorded when > 0).
    ``file_stats`` (file -> docs, tokens, seconds, bytes, device_name, finished_at, and
    the data-quality counts) lets the coverage report take throughput and data quality
    from the marker instead of each file's stats.
    """
    data: dict[str, Any] = {
        "shard": shard,
        "total_shards": total_shards,
        "minimum_shard_index": minimum_shard_index,
        "tasks": tasks,
        "files": files,
        "docs": docs,
        "source": source,
        "finished_at": now(),
    }
    if quarantined:
        data["quarantined"] = quarantined
    if file_stats:
        data["file_stats"] = file_stats
    write_atomic(shard_marker_path(run_dir, shard), json_bytes(data))


def done_shards(run_dir: Path) -> set[int]:
    """Shards with a ``<shard>.done`` marker, from one directory listing.

    Only names are read (no stat, no open): on Lustre or NFS a stat per shard of a
    10,000-shard run costs seconds. Names that are not ``<int>.done`` (temp files of an
    atomic write, editor droppings) are ignored. A missing directory means nothing done.
    """
    done: set[int] = set()
    try:
        with os.scandir(Path(run_dir) / SHARDS_DIR) as entries:
            for entry in entries:
                shard = shard_of_marker(entry.name)
                if shard is not None:
                    done.add(shard)
    except FileNotFoundError:
        pass
    return done


def shard_of_marker(name: str) -> int | None:
    """The shard a marker file name (``<shard>.done``) is for; None for any other name."""
    stem, dot, ext = name.partition(".")
    if dot and f".{ext}" == FILE_MARKER_SUFFIX and stem.isascii() and stem.isdigit():
        return int(stem)
    return None


@dataclass(frozen=True)
class DoneShards:
    """The run's done shards, in the one meaning every view uses.

    A shard is done when its marker exists, is a JSON object and, when the plan is given,
    agrees with it: the assignment (``total_shards``, ``minimum_shard_index``) and the
    number of files. A garbled marker vouches for nothing, and a marker left by another
    assignment (a re-pin interrupted before the run-directory state was reset) vouches
    for other files: neither shard is done. Snakemake only sees that the file exists, so
    the planner removes stale markers and ``shardwise verify --repair`` garbled ones.
    """

    bodies: dict[int, dict[str, Any]]  # shard -> its marker, for every done shard
    unreadable: tuple[int, ...] = ()  # shards whose marker is not a JSON object
    stale: tuple[int, ...] = ()  # shards whose marker disagrees with the plan

    @property
    def shards(self) -> set[int]:
        """The done shards."""
        return set(self.bodies)


def read_done(
    run_dir: Path,
    within: range | None = None,
    *,
    files: Mapping[int, int] | None = None,
) -> DoneShards:
    """Read every shard marker (``within`` the run's shard range, when given).

    ``files`` (shard -> planned files; absent shards have none) and ``within`` (the
    pinned range) let markers that disagree with the plan count as stale.
    """
    bodies: dict[int, dict[str, Any]] = {}
    bad: list[int] = []
    stale: list[int] = []
    for shard in sorted(done_shards(run_dir)):
        if within is not None and shard not in within:
            continue
        try:
            body = read_shard_marker(run_dir, shard)
        except (OSError, ValueError):
            body = None
        if not isinstance(body, dict):
            bad.append(shard)
        elif _disagrees(body, within, files.get(shard, 0) if files is not None else None):
            stale.append(shard)
        else:
            bodies[shard] = body
    return DoneShards(bodies, tuple(bad), tuple(stale))


def _disagrees(body: dict[str, Any], within: range | None, planned: int | None) -> bool:
    """A marker of another assignment, or one counting other files than the plan's."""
    if within is not None and (
        body.get("total_shards", len(within)) != len(within)
        or body.get("minimum_shard_index", within.start) != within.start
    ):
        return True
    return planned is not None and isinstance(body.get("files"), int) and body["files"] != planned


def remove_shard_markers(run_dir: Path, shards: Iterable[int]) -> list[int]:
    """Remove the markers of ``shards`` (those present); the ones removed."""
    removed = []
    for shard in shards:
        path = shard_marker_path(run_dir, shard)
        if path.exists():
            path.unlink()
            removed.append(shard)
    return removed


def read_shard_marker(run_dir: Path, shard: int) -> dict[str, Any]:
    """Parse a shard marker."""
    return json.loads(shard_marker_path(run_dir, shard).read_text("utf-8"))


def parse_file_marker(data: bytes) -> dict[str, Any]:
    """A file marker's content; ValueError when it is not a JSON object (it vouches for
    nothing: the file is labelled again)."""
    body = json.loads(data)
    if not isinstance(body, dict):
        msg = "not a JSON object"
        raise ValueError(msg)
    return body


def read_file_marker(output: Location, rel: str) -> dict[str, Any]:
    """The marker of source file ``rel``; FileNotFoundError, or ValueError if unreadable."""
    return parse_file_marker(output.read_bytes(file_marker_rel(rel)))


def write_snapshot(run_dir: Path, marked: set[str]) -> None:
    """Record which files had an output marker at plan time (for jobs on object stores)."""
    write_atomic(Path(run_dir) / OUTPUT_MARKERS, "".join(f"{r}\n" for r in sorted(marked)).encode())


def read_snapshot(run_dir: Path) -> set[str] | None:
    """The plan-time snapshot of the output's file markers; None when there is none."""
    try:
        return set((Path(run_dir) / OUTPUT_MARKERS).read_text("utf-8").splitlines())
    except FileNotFoundError:
        return None


def forget_in_snapshot(run_dir: Path, files: set[str]) -> None:
    """Drop ``files`` from the snapshot (after a repair removed their markers)."""
    listed = read_snapshot(run_dir)
    if listed is not None:
        write_snapshot(run_dir, listed - files)


def now() -> str:
    """UTC timestamp used in every marker."""
    return datetime.now(UTC).isoformat(timespec="seconds")
