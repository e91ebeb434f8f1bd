"""``.done`` markers: the only proof that work is complete, so always written last.

``<output>/<rel>.done`` vouches for a file's other outputs; ``<run_dir>/shards/<shard>.done``
(the Snakemake target) for every file of the shard. ``output-markers.txt`` is the planner's
listing of an object store's file markers, so jobs need not ask for each.
"""

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from shardwise.errors import RecordError
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic

FILE_MARKER_SUFFIX = ".done"
SHARDS_DIR = "shards"
#: Files with an output marker at plan time (object-store outputs only).
OUTPUT_MARKERS = "output-markers.txt"


@dataclass(frozen=True, kw_only=True)
class FileMarker:
    """``<output>/<rel>.done``: every other output of source file ``file`` is whole (``rows``
    labelled; the source's identity as planned). An absent field is None, and
    :meth:`problems` names it: markers by hand or by older versions are checked, not refused."""

    file: str | None
    task_id: str | None
    shard: int | None
    rows: int | None
    finished_at: str = ""
    source_identity: str | None = None
    #: A campaign of several sites (``campaign.site``): the site whose job labelled the
    #: file and the epoch of its lease on the shard (``store/lease.py``), so ``verify``
    #: can tell who labelled what. None for a single site.
    site: str | None = None
    lease_epoch: int | None = None

    @classmethod
    def now(
        cls,
        rel: str,
        task_id: str,
        shard: int,
        rows: int,
        identity: str | None,
        holder: tuple[str, int] | None = None,
    ) -> Self:
        """The marker of a file finished now (``holder``: the site and lease epoch)."""
        return cls(
            file=rel,
            task_id=task_id,
            shard=shard,
            rows=rows,
            finished_at=now(),
            source_identity=identity,
            site=holder[0] if holder else None,
            lease_epoch=holder[1] if holder else None,
        )

    def to_json(self) -> bytes:
        """The marker's bytes (fields that are None left out)."""
        body = dataclasses.asdict(self)
        for key in ("source_identity", "site", "lease_epoch"):
            if body[key] is None:
                del body[key]
        return json_bytes(body)

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Parse a marker; RecordError naming the field (it then vouches for nothing)."""
        return Fields.parse(raw, where).into(cls)

    def problems(self, rel: str, task_id: str, shard: int, rows: int | None) -> list[str]:
        """How this marker disagrees with the plan row and the input's ``rows``."""
        got, want = (self.file, self.task_id, self.shard), (rel, task_id, shard)
        found = _differ("the plan says", ("file", "task_id", "shard"), got, want)
        if self.rows is None:
            found.append("rows is None, not a count")
        elif rows is not None and self.rows != rows:
            found.append(f"says {self.rows} rows, the input has {rows}")
        return found


def _differ(says: str, keys: Iterable[str], got: Iterable[Any], want: Iterable[Any]) -> list[str]:
    """``key is <got>, <says> <want>`` for each key whose values differ."""
    triples = zip(keys, got, want, strict=True)
    return [f"{k} is {g!r}, {says} {w!r}" for k, g, w in triples if g != w]


#: Who marked a shard done: its job, the planner for a shard without files, the planner
#: for a shard whose every file was labelled elsewhere (another cluster), or the campaign's
#: record of another site's job (``planner/campaign.py`` ``bring_in``).
SOURCES = ("job", "empty", "remote", "campaign")


@dataclass(frozen=True, kw_only=True)
class ShardMarker:
    """``<run_dir>/shards/<shard>.done``: every file of the shard has its marker (or is
    quarantined); ``docs`` None when finished elsewhere; ``file_stats`` (file -> its stats'
    ``FIGURES``) spares the coverage report each file's stats."""

    shard: int
    total_shards: int
    minimum_shard_index: int
    tasks: int | None = None
    files: int | None = None  # None: a marker of an older version (not compared)
    docs: int | None = None
    source: str = "job"
    finished_at: str = ""
    quarantined: int = 0
    file_stats: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        """The marker's bytes (``quarantined`` and ``file_stats`` only when there are any)."""
        body = dataclasses.asdict(self)
        for key in ("quarantined", "file_stats"):
            if not body[key]:
                del body[key]
        return json_bytes(body)

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Parse a shard marker; RecordError naming the field."""
        f = Fields.parse(raw, where)
        file_stats = f.dict("file_stats", {})
        if not all(isinstance(v, dict) for v in file_stats.values()):
            raise f.refuse("file_stats", "must map each file to an object")
        source = f.str("source", "job")
        if source not in SOURCES:
            raise f.refuse("source", f"must be one of {list(SOURCES)}, got {source!r}")
        return f.into(cls, source=source, file_stats=file_stats)

    def problems(self, shard: int, within: range, planned_files: int) -> list[str]:
        """How this marker disagrees with its name, the pinned assignment and the plan."""
        keys = ("shard", "total_shards", "minimum_shard_index")
        got = (self.shard, self.total_shards, self.minimum_shard_index)
        found = _differ("run.json says", keys, got, (shard, len(within), within.start))
        if self.source == "empty" and planned_files:
            found.append(f"marked empty, but the plan gives it {planned_files} file(s)")
        if self.files is not None and self.files != planned_files:
            found.append(f"says {self.files} file(s), the plan has {planned_files}")
        return found


def shard_marker_path(run_dir: Path, shard: int) -> Path:
    """The Snakemake target of ``shard``."""
    return Path(run_dir) / SHARDS_DIR / f"{shard}{FILE_MARKER_SUFFIX}"


def write_shard_marker(run_dir: Path, marker: ShardMarker) -> None:
    """Mark a shard done (atomically), stamped now."""
    stamped = dataclasses.replace(marker, finished_at=now())
    write_atomic(shard_marker_path(run_dir, marker.shard), stamped.to_json())


def numbered(directory: Path, suffix: str = "") -> set[int]:
    """The numbers ``n`` of the ``<n><suffix>`` names in ``directory``, from names alone (a
    stat per shard costs seconds on Lustre at 10,000 shards); other names are ignored."""
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries if e.name.endswith(suffix)]
        stems = [name[: len(name) - len(suffix)] for name in names]
    except (FileNotFoundError, NotADirectoryError):
        return set()
    return {int(stem) for stem in stems if stem.isascii() and stem.isdigit()}


def done_shards(run_dir: Path) -> set[int]:
    """Shards with a ``<shard>.done`` marker (one listing)."""
    return numbered(Path(run_dir) / SHARDS_DIR, FILE_MARKER_SUFFIX)


def shard_of_marker(name: str) -> int | None:
    """The shard a marker file name (``<shard>.done``) is for; None for any other name."""
    stem, dot, ext = name.partition(".")
    if dot and f".{ext}" == FILE_MARKER_SUFFIX and stem.isascii() and stem.isdigit():
        return int(stem)
    return None


@dataclass(frozen=True)
class DoneShards:
    """The run's done shards, in the one meaning every view uses: the marker exists, parses
    and agrees with the plan (assignment, number of files). A garbled marker, or one of
    another assignment, vouches for nothing; Snakemake sees only that the file exists, so
    the planner removes stale ones and ``verify --repair`` garbled ones."""

    markers: dict[int, ShardMarker]  # every done shard's marker
    unreadable: tuple[int, ...] = ()  # shards whose marker does not parse
    stale: tuple[int, ...] = ()  # shards whose marker disagrees with the plan

    @property
    def shards(self) -> set[int]:
        """The done shards."""
        return set(self.markers)


def read_done(run_dir: Path, within: range, files: Mapping[int, int]) -> DoneShards:
    """Every shard marker of the pinned range ``within``, judged against the plan's
    ``files`` per shard (absent shards have none); see :class:`DoneShards`."""
    found: dict[int, ShardMarker] = {}
    bad, stale = [], []
    for shard in sorted(done_shards(run_dir)):
        if shard not in within:
            continue
        try:
            marker = read_shard_marker(run_dir, shard)
        except (OSError, RecordError):
            bad.append(shard)
            continue
        planned = files.get(shard, 0)
        agrees = (marker.total_shards, marker.minimum_shard_index) == (len(within), within.start)
        if agrees and marker.files in (None, planned):
            found[shard] = marker
        else:
            stale.append(shard)
    return DoneShards(found, tuple(bad), tuple(stale))


def remove_shard_markers(run_dir: Path, shards: Iterable[int]) -> list[int]:
    """Remove the markers of ``shards`` (those present); the ones removed."""
    removed = [shard for shard in shards if shard_marker_path(run_dir, shard).exists()]
    for shard in removed:
        shard_marker_path(run_dir, shard).unlink()
    return removed


def read_shard_marker(run_dir: Path, shard: int) -> ShardMarker:
    """Parse a shard marker; RecordError when it is not one."""
    path = shard_marker_path(run_dir, shard)
    return ShardMarker.from_json(path.read_bytes(), str(path))


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
