"""``shardwise verify``: an fsck for a run, from the outside, trusting no marker.

Every done shard and every marked file is checked against the plan and the *input*,
each output through its kind's parser and checker (``run/outputs``); one listing of each
root finds orphans. A *problem* contradicts a marker (exit 1); a *warning* is a state a
retry clears by itself.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

from shardwise.errors import ConfigError, RecordError, ShardwiseError
from shardwise.ops.verify.files import FileCheck, add_checks, check_file, check_presence, choose
from shardwise.ops.verify.render import Finding, VerifyReport
from shardwise.run import (
    drift,
    markers,
    outputs,
    plan,
    retired,
    runjson,
)
from shardwise.run import state as run_state
from shardwise.run.opened import OpenRun, open_run
from shardwise.run.sharding import shard_for_task, shard_range
from shardwise.store import lease
from shardwise.store.atomic import is_temp_name
from shardwise.store.location import Location


def verify_run(
    run_dir: Path,
    *,
    sample: float = 1.0,
    seed: int | None = None,
    jobs: int = 4,
    complete: bool = False,
) -> VerifyReport:
    """Check a run's markers against its outputs and inputs (module docstring); a
    ShardwiseError only when it cannot be verified at all (no run.json, plan, listing)."""
    if not 0 < sample <= 1:
        raise ConfigError(f"--sample must be in (0, 1], got {sample}")
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    run_dir = Path(run_dir)
    ctx = open_run(run_dir)
    meta, table, left_out = ctx.meta, ctx.plan_as_written, ctx.quarantined
    planned = _planned(ctx, table)
    in_run = shard_range(meta.total_shards, meta.minimum_shard_index)
    report = VerifyReport(
        run_dir=str(run_dir),
        sample=sample,
        shards_total=len(in_run),
        files_planned=len(planned),
        files_quarantined=len(left_out),
    )
    _check_plan(report, run_dir, meta, planned)
    report.quarantined = [Finding(ctx.source.url(f), e.reason) for f, e in sorted(left_out.items())]

    listing = dict(ctx.output.list_files())  # the one listing of the output
    found = _index_outputs(report, ctx, listing, planned, retired.load(run_dir))
    _check_mirror(report, ctx.output, meta, listing)

    files_by_shard: dict[int, list[str]] = defaultdict(list)
    for rel, (_task, shard) in planned.items():
        files_by_shard[shard].append(rel)
    done = markers.done_shards(run_dir)
    job_shards = _check_shards(
        report,
        run_dir,
        meta=meta,
        done=done,
        files_by_shard=files_by_shard,
        found=found,
        output=ctx.output,
        left_out=set(left_out),
    )
    report.shards_done = len(done & set(in_run))
    if complete:
        _check_complete(
            report,
            run_dir,
            set(in_run) - done,
            files_by_shard=files_by_shard,
            found=found,
            left_out=left_out,
        )

    marked = sorted(rel for rel, kinds in found.items() if outputs.MARKER.name in kinds)
    report.files_marked = sum(rel not in left_out for rel in marked)  # as coverage counts
    listed = _check_identities(report, ctx, table, set(marked))
    _check_drift(report, ctx, set(planned), listed, set(left_out))
    for rel, kinds in sorted(found.items()):
        check_presence(report, ctx, rel, kinds, planned[rel][1] in done)
        if rel in left_out and outputs.MARKER.name in kinds:
            report.warn(ctx.output.url(outputs.MARKER.rel(rel)), _LABELLED_QUARANTINED)

    names = [name for name, _model, _input in meta.classifiers]

    def check(rel: str) -> FileCheck:
        return check_file(ctx, rel, planned[rel], names, found[rel])

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        checks = list(pool.map(check, choose(marked, sample, seed)))
    marker_rows = add_checks(report, checks)
    _check_shard_docs(report, run_dir, job_shards, files_by_shard, marker_rows)
    return report


_LABELLED_QUARANTINED = "quarantined, yet labelled (`shardwise quarantine --release` if it is fine)"


def _check_complete(
    report: VerifyReport,
    run_dir: Path,
    open_shards: set[int],
    *,
    files_by_shard: dict[int, list[str]],
    found: dict[str, dict[str, int]],
    left_out: Mapping[str, Any],
) -> None:
    """``--complete``: every shard not done is a problem, with its files left."""
    for shard in sorted(open_shards):
        files = files_by_shard.get(shard, ())
        left = sum(outputs.MARKER.name not in found[rel] and rel not in left_out for rel in files)
        where = str(markers.shard_marker_path(run_dir, shard))
        what = f"shard {shard} is not done ({left} of {len(files)} file(s) without a marker)"
        report.problem(where, what)


def _planned(ctx: OpenRun, table: pa.Table) -> dict[str, tuple[str, int]]:
    """Planned file -> (task id, shard); the source learns the sizes (no HEAD per file)."""
    rows = table.to_pydict()
    ctx.source.remember_sizes(dict(zip(rows["file"], rows["size"], strict=True)))
    return {f: (t, s) for f, t, s in zip(rows["file"], rows["task_id"], rows["shard"], strict=True)}


def _check_plan(
    report: VerifyReport, run_dir: Path, meta: runjson.RunMeta, planned: dict[str, tuple[str, int]]
) -> None:
    """The cached plan must be the one run.json pins: same tasks, same shard rule."""
    where = str(run_dir / plan.PLAN_PARQUET)
    summary = plan.load_summary(run_dir)
    mismatch = summary.mismatch(meta) if summary is not None else []
    if mismatch:
        msg = f"built for another assignment than run.json pins ({'; '.join(mismatch)}): "
        msg += "run `snakemake -n` (or `shardwise plan --configfile <config>`) to rebuild the "
        msg += "plan; --repair cannot (it needs the config's input settings)"
        report.problem(str(run_dir / plan.PLAN_JSON), msg)
    if runjson.fingerprint({task for task, _shard in planned.values()}) != meta.fingerprint:
        report.problem(where, "its task set does not match run.json's fingerprint")
    rule = functools.partial(
        shard_for_task, total_shards=meta.total_shards, minimum_shard_index=meta.minimum_shard_index
    )
    moved = {task for task, shard in planned.values() if shard != rule(task)}
    if moved:
        report.problem(where, f"{len(moved)} task(s) in the wrong shard (e.g. {min(moved)!r})")


def _check_drift(
    report: VerifyReport, ctx: OpenRun, planned: set[str], listed: set[str], left_out: set[str]
) -> None:
    """Planned files gone from the input (this listing), and files the last dry run
    found added that are still there and still unplanned: ``plan --extend`` takes them in."""
    recorded = drift.load(ctx.run_dir)
    added = [f for f in recorded.added_files if f in listed and f not in planned]
    found = drift.InputDrift.of(added, planned - listed - left_out)
    if found:
        report.input_drift = found.counted()
        msg = f"the input changed since it was planned: {found.summary()}; "
        msg += "`shardwise plan --extend` takes it in"
        report.problem(ctx.source.url(""), msg)


def _check_identities(
    report: VerifyReport, ctx: OpenRun, table: pa.Table, marked: set[str]
) -> set[str]:
    """Input files changed in place since planned (one listing of the input; labelled ones
    are problems); the files listed."""
    now = {rel: plan.identity(size, v) for rel, size, v in ctx.source.list_entries()}
    report.changed = plan.changed_files(table, now)
    for rel, (planned, current) in sorted(report.changed.items()):
        if rel in marked:
            msg = f"changed in place since it was labelled (size:version {planned} -> "
            msg += f"{current}): its labels describe content that no longer exists; --repair "
            msg += "relabels it, --accept-changed keeps its labels"
            report.problem(ctx.source.url(rel), msg, file=rel)
        else:
            report.warn(ctx.source.url(rel), "changed since planned; it is labelled as it is now")
    return set(now)


def _check_mirror(
    report: VerifyReport, output: Location, meta: runjson.RunMeta, listing: dict[str, int]
) -> None:
    """The output root's run.json (the mirror) must pin the same run as the run dir's;
    when it does not, which copy to keep (``report.copies``)."""
    where = output.url(runjson.RUN_JSON)
    if runjson.RUN_JSON not in listing:
        report.warn(where, "missing (the output root does not say which run wrote it)")
        return
    try:
        copy = runjson.read_copy(output)
    except (ShardwiseError, OSError) as e:
        report.problem(where, f"unreadable: {e}")
        return
    if copy.meta is None:
        report.problem(where, f"unreadable: {copy.damage or 'vanished while verifying'}")
        return
    for name, theirs, ours in runjson.differences(copy.meta, meta):
        report.problem(where, f"pins {name}={theirs!r}, the run directory {ours!r}")
    report.copies = run_state.copies_disagree(Path(report.run_dir), meta, copy)
    trust = run_state.copy_to_keep(Path(report.run_dir), meta, copy)
    report.measured_on_replaced = trust is not None and trust.keeps_output


def _index_outputs(
    report: VerifyReport,
    ctx: OpenRun,
    listing: dict[str, int],
    planned: dict[str, tuple[str, int]],
    retired_files: set[str],
) -> dict[str, dict[str, int]]:
    """Planned file -> {kind: size} of its outputs; everything else is an orphan (but the
    outputs of retired files, kept on purpose)."""
    found: dict[str, dict[str, int]] = {rel: {} for rel in planned}
    corpus = ctx.output.inner_prefix(ctx.source)
    for rel, size in sorted(listing.items()):
        if rel == runjson.RUN_JSON or rel.startswith(lease.CAMPAIGN):
            continue  # the run's pin; a campaign's leases and records (store/lease.py)
        where = ctx.output.url(rel)
        if is_temp_name(rel.rsplit("/", 1)[-1]):
            report.orphans += 1
            report.warn(where, "temp file of an interrupted write (safe to delete)")
            continue
        hit = outputs.kind_of(rel)
        if hit is not None and hit[1] in planned:
            found[hit[1]][hit[0].name] = size
            continue
        if hit is not None and hit[1] in retired_files:
            report.retired += 1
            continue
        if hit is None and corpus is not None and rel.startswith(corpus):
            continue  # the corpus itself, when it lives under the output prefix
        report.orphans += 1
        if hit is not None:
            report.problem(where, f"orphan {hit[0].name}: {hit[1]!r} is not a file of this run")
        else:
            report.problem(where, "orphan: not an output of any file of this run")
    _index_other_roots(report, ctx, found, retired_files)
    return found


def _index_other_roots(
    report: VerifyReport, ctx: OpenRun, found: dict[str, dict[str, int]], retired_files: set[str]
) -> None:
    """The outputs under the run's other roots (Dolma attributes): one listing each; a
    file there of no planned source is a warning (the root may hold other sets)."""
    for name, loc in ctx.roots().items():
        if name == "output":
            continue
        for rel, size in sorted(loc.list_files()):
            if is_temp_name(rel.rsplit("/", 1)[-1]):
                report.warn(loc.url(rel), "temp file of an interrupted write (safe to delete)")
                continue
            for kind in outputs.kinds():
                source = rel.removesuffix(kind.suffix)
                if kind.root != name or not rel.endswith(kind.suffix):
                    continue
                if source in found:
                    found[source][kind.name] = size
                    break
                if source in retired_files:
                    report.retired += 1
                    break
            else:
                report.warn(loc.url(rel), f"not the {name} of any file of this run")


def _check_shards(
    report: VerifyReport,
    run_dir: Path,
    *,
    meta: runjson.RunMeta,
    done: set[int],
    files_by_shard: dict[int, list[str]],
    found: dict[str, dict[str, int]],
    output: Location,
    left_out: set[str],
) -> dict[int, int]:
    """Each shard marker fits the assignment and its files are marked (or quarantined);
    returns the docs each job-written marker claims."""
    in_run = shard_range(meta.total_shards, meta.minimum_shard_index)
    job_docs: dict[int, int] = {}
    shards_dir = run_dir / markers.SHARDS_DIR
    if shards_dir.is_dir():
        for path in sorted(shards_dir.iterdir()):
            if is_temp_name(path.name):
                report.warn(str(path), "temp file of an interrupted write (safe to delete)")
    for shard in sorted(done):
        where = str(markers.shard_marker_path(run_dir, shard))
        if shard not in in_run:
            outside = f"outside this run's shards {in_run.start}..{in_run.stop - 1}"
            report.problem(where, f"marks shard {shard}, {outside}")
            continue
        try:
            marker = markers.read_shard_marker(run_dir, shard)
        except (OSError, RecordError) as e:
            reason = e.reason if isinstance(e, RecordError) else str(e)
            report.problem(where, f"unreadable shard marker: {reason}", shard=shard)
            continue
        files = files_by_shard.get(shard, [])
        for what in marker.problems(shard, in_run, len(files)):
            report.problem(where, what, shard=shard)
        for rel in files:
            if outputs.MARKER.name not in found[rel] and rel not in left_out:
                where = output.url(outputs.MARKER.rel(rel))
                report.problem(where, f"missing, but shard {shard} is marked done", shard=shard)
        if marker.source in ("job", "campaign") and marker.docs is not None:
            job_docs[shard] = marker.docs
    return job_docs


def _check_shard_docs(
    report: VerifyReport,
    run_dir: Path,
    job_docs: dict[int, int],
    files_by_shard: dict[int, list[str]],
    marker_rows: dict[str, int | None],
) -> None:
    """A job's shard marker counts the rows of its files' markers (when all were read)."""
    for shard, docs in sorted(job_docs.items()):
        rows = [marker_rows.get(rel) for rel in files_by_shard.get(shard, [])]
        if any(r is None for r in rows):
            continue  # not every marker was read (sampling, or already reported)
        total = sum(r for r in rows if r is not None)
        if total != docs:
            where = str(markers.shard_marker_path(run_dir, shard))
            what = f"says {docs} docs, its files' markers add up to {total}"
            report.problem(where, what, shard=shard)
