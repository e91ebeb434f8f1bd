"""What the Snakefile calls at parse time: plan or read the run, nothing else.

The top-level Snakemake process (a dry run or a real run from the command line)
lists the input once, validates or creates run.json (locally and at the output
root), caches the plan, records the job settings, marks shards that need no job
(empty ones, and ones whose every file is already marked done in the output,
e.g. by another cluster) and prints the coverage report.

A Snakemake process inside a cluster job re-parses the Snakefile too; there this
module only reads run.json from the run directory: no listing, no printing.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from shardwise import inflight, job, markers, plan, runmeta
from shardwise.config import Settings
from shardwise.errors import InputError, RunMismatchError
from shardwise.manifest import build_tasks, select_files
from shardwise.sharding import shard_range
from shardwise.storage import Location

LOCK_FILE = ".shardwise.lock"
_held_locks: list[IO[str]] = []  # keeps run-dir locks open for the life of the process


@dataclass(frozen=True)
class RunInfo:
    """What the Snakefile needs to declare its targets."""

    run_dir: Path
    shards: tuple[int, ...]
    output_uri: str
    in_flight: tuple[int, ...] = ()  # held by live jobs of an earlier invocation

    def targets(self) -> list[str]:
        """The shard markers, the run's Snakemake targets (in-flight shards left out)."""
        skip = set(self.in_flight)
        return [
            str(markers.shard_marker_path(self.run_dir, s)) for s in self.shards if s not in skip
        ]

    def when_settled(self, *paths: str) -> list[str]:
        """``paths`` unless shards are in flight (then the run is not whole yet)."""
        return [] if self.in_flight else list(paths)


def prepare_run(
    config: dict[str, Any],
    *,
    main_process: bool,
    dryrun: bool = False,
    report: bool = True,
    out: IO[str] | None = None,
    submitter: inflight.Submitter | None = None,
) -> RunInfo:
    """Plan (top-level process) or read (cluster job) the run described by ``config``.

    ``submitter`` (from the Snakefile) lets planning leave out shards that live jobs
    of an earlier invocation hold (see inflight.py).
    """
    settings = Settings.from_config(config)
    run_dir = settings.run_dir
    if not main_process:
        meta = runmeta.read(Location(str(run_dir)))
        return RunInfo(
            run_dir,
            tuple(shard_range(meta.total_shards, meta.minimum_shard_index)),
            meta.output_uri,
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    if not dryrun:
        lock_run_dir(run_dir)
    table, task_count, fingerprint, fresh = _plan_table(settings)
    meta = runmeta.RunMeta.new(
        total_shards=settings.total_shards,
        minimum_shard_index=settings.minimum_shard_index,
        files_per_task=settings.input.files_per_task,
        input_uri=settings.input.uri,
        output_uri=settings.output_uri,
        task_count=task_count,
        fingerprint=fingerprint,
        classifiers=[(c["name"], c["model"], c["input"]) for c in settings.classifiers],
    )
    _pin(settings, meta, table)
    if fresh:
        plan.save(run_dir, table, plan.summarize(table, settings.total_shards))
    job.write_settings(run_dir, settings.job_settings())
    output = Location(settings.output_uri, settings.storage)
    mark_shards_without_work(run_dir, table, meta, output)
    flight = inflight.find(run_dir, submitter, done=markers.done_shards(run_dir))
    if submitter is not None:
        submitter.record(run_dir)
        inflight.clear_stale_incomplete(run_dir, submitter.workdir, flight)
    if report:
        print_coverage(run_dir, out or sys.stderr, flight.lines())
    return RunInfo(
        run_dir,
        tuple(shard_range(meta.total_shards, meta.minimum_shard_index)),
        settings.output_uri,
        tuple(sorted(flight.shards)),
    )


def _plan_table(settings: Settings) -> tuple[pa.Table, int, str, bool]:
    """(plan, task count, fingerprint, fresh): the cached plan when listing is off or the
    listed task set matches it, else a new one (not yet saved: run.json is checked first).
    """
    run_dir = settings.run_dir
    cached = plan.load_summary(run_dir)
    if cached is not None and not settings.input.relist:
        return plan.load(run_dir), cached.tasks, cached.fingerprint, False
    source = Location(settings.input.uri, settings.storage)
    listing = source.list_files()
    files = select_files(listing, glob=settings.input.glob, fmt=settings.input.format)
    if not files:
        msg = (
            f"no input files under {settings.input.uri} match glob {settings.input.glob!r} "
            f"and format {settings.input.format!r} (.parquet, .jsonl, .jsonl.gz, .jsonl.zst)"
        )
        raise InputError(msg)
    tasks = build_tasks([rel for rel, _ in files], settings.input.files_per_task)
    fingerprint = runmeta.fingerprint(t.task_id for t in tasks)
    if cached is not None and cached.fingerprint == fingerprint:
        return plan.load(run_dir), cached.tasks, fingerprint, False
    table = plan.build(
        files,
        files_per_task=settings.input.files_per_task,
        total_shards=settings.total_shards,
        minimum_shard_index=settings.minimum_shard_index,
        category_regex=settings.input.category_regex,
        tasks=tasks,
    )
    return table, len(tasks), fingerprint, True


def _pin(settings: Settings, meta: runmeta.RunMeta, table: pa.Table) -> None:
    """Validate run.json in the run dir and at the output root; create where absent.

    Both are checked before either is created, so a refused run writes nothing.
    """
    run_dir = settings.run_dir

    def task_change() -> tuple[int, int]:
        if plan.load_summary(run_dir) is None:
            return (meta.task_count, 0)
        old = plan.task_ids(plan.load(run_dir))
        new = plan.task_ids(table)
        return len(new - old), len(old - new)

    local = Location(str(run_dir))
    output = Location(settings.output_uri, settings.storage)
    absent = []
    for loc in (local, output):
        try:
            existing = runmeta.RunMeta.from_json(
                loc.read_bytes(runmeta.RUN_JSON), loc.url(runmeta.RUN_JSON)
            )
        except FileNotFoundError:
            absent.append(loc)
            continue
        runmeta.check_same(existing, meta, loc.url(runmeta.RUN_JSON), task_change)
    for loc in reversed(absent):  # output first: it is shared with other clusters
        runmeta.create_or_validate(loc, meta, task_change)


def mark_shards_without_work(
    run_dir: Path, table: pa.Table, meta: runmeta.RunMeta, output: Location
) -> dict[str, int]:
    """Mark empty shards, and shards whose every file has an output marker, as done.

    The output is listed once (not probed per file), and only when some shard with
    work is still open: a finished run costs nothing here.
    """
    done = markers.done_shards(run_dir)
    counts = {"empty": 0, "remote": 0}
    common = {
        "total_shards": meta.total_shards,
        "minimum_shard_index": meta.minimum_shard_index,
    }
    for shard in plan.empty_shards(table, meta.total_shards, meta.minimum_shard_index):
        if shard not in done:
            markers.write_shard_marker(
                run_dir, shard, tasks=0, files=0, docs=0, source="empty", **common
            )
            counts["empty"] += 1
    open_shards = plan.nonempty_shards(table) - done
    if not open_shards:
        return counts
    marked = {markers.source_of_marker(m) for m in output.list_suffix(markers.FILE_MARKER_SUFFIX)}
    if output.remote:  # jobs read this instead of probing each file's marker
        job.write_output_markers(run_dir, marked)
    if not marked:
        return counts
    rows = table.to_pydict()
    per_shard: dict[int, list[int]] = {}
    for i, shard in enumerate(rows["shard"]):
        if shard in open_shards:
            per_shard.setdefault(shard, []).append(i)
    for shard, idx in per_shard.items():
        if all(rows["file"][i] in marked for i in idx):
            markers.write_shard_marker(
                run_dir,
                shard,
                tasks=len({rows["task_id"][i] for i in idx}),
                files=len(idx),
                docs=None,
                source="remote",
                **common,
            )
            counts["remote"] += 1
    return counts


def lock_run_dir(run_dir: Path) -> None:
    """Refuse a second top-level Snakemake process on the same run directory."""
    path = run_dir / LOCK_FILE
    fh = path.open("a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as e:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        msg = (
            f"{run_dir} is in use by {holder}; two runs on one run directory would race. "
            "Wait for it to finish (or stop it), then run again."
        )
        raise RunMismatchError(msg) from e
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()} on {os.uname().nodename} since {time.ctime()}\n")
    fh.flush()
    _held_locks.append(fh)


def print_coverage(run_dir: Path, out: IO[str], extra: list[str] | None = None) -> None:
    """Print the coverage table once, before scheduling (``extra``: in-flight lines)."""
    from shardwise import coverage

    cov = coverage.compute(coverage.load_state(run_dir))
    out.write(coverage.format_table(cov) + "\n" + "".join(f"{line}\n" for line in extra or ()))
    out.flush()
