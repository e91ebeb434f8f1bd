"""What the coverage report reads, all of it, once: :func:`load_state` does the I/O, as
little as possible (one plan read, one listing of ``shards/``, the done shard markers, one
listing of a local output root; on an object store the dry run's snapshot of the
output's markers and the open shards' journals instead of a request per file), into a
:class:`RunState` that ``ops/coverage/compute.py`` computes from."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import RecordError
from shardwise.run import (
    adaptation,
    benchmarks,
    changes,
    claims,
    drift,
    failures,
    jobevents,
    journal,
    markers,
    opened,
    outputs,
    quarantine,
    skipped,
    statstable,
)
from shardwise.run import state as run_state
from shardwise.run.filestats import FIGURES
from shardwise.store.location import Location


@dataclass(frozen=True, eq=False, kw_only=True)
class ShardMarkers:
    """Contents of the done shard markers, as columns (NaN where a field is absent)."""

    shard: np.ndarray  # int64, ascending
    docs: np.ndarray  # float64
    files: np.ndarray  # float64
    finished_at: np.ndarray  # float64, POSIX seconds
    #: Per-file throughput fields the markers carry (``file_stats``), as stats dicts.
    file_stats: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, eq=False, kw_only=True)
class RunState:
    """Everything :func:`compute` and the report need, read once from disk (``stats``
    None: none available; ``output_markers`` None: not listed, only whole shards count)."""

    run_dir: Path
    name: str
    total_shards: int
    minimum_shard_index: int
    plan: pa.Table  # plan.SCHEMA, one row per source file
    done_shards: np.ndarray  # int64, sorted shard numbers with a marker, within range
    markers: ShardMarkers
    failing_shards: np.ndarray  # int64, shards with failure records and no marker
    stats: statstable.StatsTable | None
    output_markers: frozenset[str] | None
    #: The output roots' listings by output kind (local roots, listed here); else None.
    output_scan: outputs.Scan | None = None
    roots: tuple[str, ...] = ("output",)  # the roots the run writes to (names)
    quarantined: dict[str, quarantine.Entry] = field(default_factory=dict)
    unreadable_markers: tuple[str, ...] = ()  # markers that vouch for nothing (not done)
    stale_markers: tuple[str, ...] = ()  # shard markers of another assignment (not done)
    #: Labelled input files changed in place (as the last dry run found): file -> identities.
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: What the last listing of the input left out, judged by ``input_format``.
    skipped: skipped.Skipped = field(default_factory=skipped.Skipped)
    drift: drift.InputDrift = field(default_factory=drift.InputDrift)
    copies: str = ""  # the two run.json copies disagree: how, and which to keep
    input_format: str = "auto"
    #: The newest failure record of each failing shard (what stopped it last).
    last_failures: dict[int, failures.FailureRecord] = field(default_factory=dict)
    #: What the last invocation ran in parallel: (count, "GPU" or "local job").
    parallel: tuple[int, str] = (1, "GPU")
    #: What the workflow's walltime adaptation changed (None: it never adapted).
    adapted: adaptation.Adaptation | None = None
    #: What SLURM did to the run's jobs: preemptions, node failures, lost jobs.
    job_events: tuple[jobevents.JobEvent, ...] = ()
    loaded_at: datetime = field(default_factory=datetime.now)  # "the last hour" ends here
    #: Each benchmarked shard job's wall seconds (start-up included): the ETA's pace.
    job_seconds: dict[int, float] = field(default_factory=dict)


def _marker_columns(found: dict[int, markers.ShardMarker]) -> ShardMarkers:
    """The done shard markers as columns (NaN where a field is absent), shards ascending."""
    shards = sorted(found)
    rows = [
        {**figures, "file": rel, "shard": shard}
        for shard in shards
        for rel, figures in found[shard].file_stats.items()
    ]
    return ShardMarkers(
        shard=np.array(shards, dtype=np.int64),
        docs=np.array([statstable.number(found[s].docs) for s in shards], np.float64),
        files=np.array([statstable.number(found[s].files) for s in shards], np.float64),
        finished_at=np.array(
            [statstable.parse_time(found[s].finished_at) for s in shards], np.float64
        ),
        file_stats=tuple(rows),
    )


def _readable_file_markers(
    output: Location, names: set[str], plan: pa.Table, done_shards: np.ndarray
) -> tuple[set[str], list[str]]:
    """Per-file markers that parse, among those of shards not done (a done shard vouches
    for its files: a finished 56k-file run reads none here)."""
    if not names:
        return names, []
    files = plan["file"]
    candidates = pc.is_in(files, value_set=pa.array(sorted(names), pa.string()))
    open_shard = ~np.isin(plan["shard"].to_numpy(), done_shards)
    wanted = files.filter(pa.array(candidates.to_numpy(zero_copy_only=False) & open_shard))
    bad = []
    for rel in wanted.to_pylist():
        try:
            outputs.read_marker(output, rel)
        except (OSError, ValueError):
            bad.append(rel)
    return names - set(bad), bad


def _remote_file_markers(
    run_dir: Path, plan: pa.Table, done: np.ndarray
) -> tuple[set[str], list[dict[str, Any]]]:
    """On an object store, the labelled files of the shards not done without a request
    per file: the planner's snapshot of the output's markers (one listing per dry run)
    and the journals of the open shards (each file a job finished since): what the next
    job skips. With the journal's figures of each file, as a shard marker carries them."""
    snapshot = markers.read_snapshot(run_dir) or set()
    planned = set(plan["file"].to_pylist())
    closed = {int(s) for s in done}
    found = {rel for rel in snapshot if rel in planned}
    rows: list[dict[str, Any]] = []
    for shard in journal.shards(run_dir):
        if shard in closed:
            continue  # its marker carries its files and their figures
        for rel, entry in journal.entries(run_dir, shard).items():
            if rel in planned:
                found.add(rel)
                if entry.stats is not None:
                    kept = {k: entry.stats.get(k) for k in FIGURES}
                    rows.append({**kept, "file": rel, "shard": shard})
    return found, rows


def _scan_local(
    output: Location, attributes: Location | None
) -> tuple[outputs.Scan, tuple[str, ...]]:
    """The local output root by kind (names only), and a local attributes root; and the
    roots listed (a remote attributes root is ``verify``'s to list)."""
    found = outputs.scan(output.list_names())
    if attributes is None or attributes.remote:
        return found, ("output",)
    found.found[outputs.DOLMA.name] = dict.fromkeys(attributes.list_names(), 0)
    return found, ("output", "attributes")


def _read_all(output: Location, rels: Iterable[str]) -> Iterator[bytes]:
    """The bytes of each output; one that vanished since the listing is skipped."""
    for rel in rels:
        try:
            yield output.read_bytes(rel)
        except OSError:
            continue


def load_state(
    run_dir: Path,
    *,
    read_stats: Callable[[], Iterable[dict[str, Any]]] | None = None,
    output_markers: set[str] | None = None,
) -> RunState:
    """Read a run directory (and a local output root, listed once) into a
    :class:`RunState`; ``read_stats`` replaces reading the stats (``lambda: ()``: none)."""
    pinned = opened.open_run(run_dir, settings_required=False)
    run_dir, meta, plan, done_markers = pinned.run_dir, pinned.meta, pinned.plan, pinned.done
    total, minimum = meta.total_shards, meta.minimum_shard_index
    shard_markers = _marker_columns(done_markers.markers)
    done = shard_markers.shard
    unreadable = [str(markers.shard_marker_path(run_dir, s)) for s in done_markers.unreadable]
    stale = [str(markers.shard_marker_path(run_dir, s)) for s in done_markers.stale]
    failing = failures.failing_shards(run_dir, done)
    last = {int(s): r for s in failing if (r := failures.latest(run_dir, int(s))) is not None}

    output = pinned.output
    seen = _outputs_seen(pinned, done, shard_markers, read_stats, output_markers)
    stats, output_markers, found, scanned_roots, bad_markers = seen
    unreadable += bad_markers
    return RunState(
        run_dir=run_dir,
        name=run_dir.resolve().name,
        total_shards=total,
        minimum_shard_index=minimum,
        plan=plan,
        done_shards=done,
        markers=shard_markers,
        failing_shards=failing,
        last_failures=last,
        parallel=recorded_parallel(run_dir),
        stats=stats if stats is not None and len(stats) else None,
        output_markers=frozenset(output_markers) if output_markers is not None else None,
        output_scan=found,
        roots=scanned_roots,
        quarantined=pinned.quarantined,
        unreadable_markers=tuple(unreadable),
        stale_markers=tuple(stale),
        changed=changes.load(run_dir)[0],
        skipped=skipped.load(run_dir),
        drift=drift.load(run_dir),
        # ``input.format`` as the last plan recorded it (``auto`` before any)
        input_format=pinned.settings.input.format if pinned.settings is not None else "auto",
        copies=run_state.copies_disagree(run_dir, meta, run_state.output_copy(output)),
        adapted=_adapted(run_dir),
        job_events=tuple(jobevents.load(run_dir)),
        job_seconds=benchmarks.shard_seconds(run_dir),
    )


def _outputs_seen(
    run: opened.OpenRun,
    done: np.ndarray,
    shard_markers: ShardMarkers,
    read_stats: Callable[[], Iterable[dict[str, Any]]] | None,
    output_markers: set[str] | None,
) -> tuple[
    statstable.StatsTable | None, set[str] | None, outputs.Scan | None, tuple[str, ...], list[str]
]:
    """What the outputs say: the run's files' stats (from ``read_stats``, the open shards'
    journals on a store, a local root's stats files, and the shard markers), the files
    with a marker, the local listing and the roots it covered, the unreadable markers."""
    run_dir, output, plan = run.run_dir, run.output, run.plan
    stats: statstable.StatsTable | None = None
    # Files whose shard marker carries their figures: their stats are not read.
    in_markers = {row["file"] for row in shard_markers.file_stats}
    found: outputs.Scan | None = None
    scanned_roots: tuple[str, ...] = ("output",)
    unreadable: list[str] = []
    if read_stats is not None:
        stats = statstable.from_rows(read_stats())
    elif output.remote and output_markers is None:  # what the jobs trust instead of a listing
        output_markers, journaled = _remote_file_markers(run_dir, plan, done)
        stats = statstable.from_rows(journaled) if journaled else None
    elif not output.remote:
        found, scanned_roots = _scan_local(output, run.attributes)
        unread = [outputs.STATS.rel(r) for r in found.of(outputs.STATS) if r not in in_markers]
        stats = statstable.from_json(_read_all(output, unread))
        if output_markers is None:
            output_markers, bad_files = _readable_file_markers(
                output, set(found.of(outputs.MARKER)), plan, done
            )
            unreadable = [output.url(outputs.MARKER.rel(rel)) for rel in bad_files]
    if shard_markers.file_stats:
        from_markers = statstable.from_rows(shard_markers.file_stats)
        stats = from_markers if stats is None else statstable.concat(stats, from_markers)
    if stats is not None:  # the run's files only: a retired file's stats stay out of rates
        stats = stats.select(plan_index(plan, stats.file) >= 0)
        stats = stats.with_bytes(plan_values(plan, stats.file, "size"))
    return stats, output_markers, found, scanned_roots, unreadable


def _adapted(run_dir: Path) -> adaptation.Adaptation | None:
    """The walltime adaptation's record; a damaged one shows as none (status names it)."""
    try:
        return adaptation.load(run_dir)
    except RecordError:
        return None


def plan_index(plan: pa.Table, files: np.ndarray) -> np.ndarray:
    """Row of each file in the plan, -1 when the file is not in the plan."""
    idx = pc.index_in(pa.array(files.tolist(), pa.string()), value_set=plan["file"])
    return idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def plan_values(plan: pa.Table, files: np.ndarray, column: str) -> np.ndarray:
    """``plan[column]`` for each file as float64, NaN for files not in the plan."""
    idx = plan_index(plan, files)
    out = np.full(idx.size, np.nan)
    known = idx >= 0
    out[known] = plan[column].to_numpy().astype(np.float64)[idx[known]]
    return out


def recorded_parallel(run_dir: Path) -> tuple[int, str]:
    """How many jobs the run's last top-level invocation could run at once, and of what:
    ``--jobs`` GPUs on a cluster, ``--cores`` local jobs; (1, "GPU") before any."""
    submitter = claims.Submitter.recorded(run_dir)
    if submitter is None:
        return (1, "GPU")
    return (max(1, submitter.parallel), "GPU" if submitter.cluster else "local job")
