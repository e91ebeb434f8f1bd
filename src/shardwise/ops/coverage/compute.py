"""What is done and what is left, per category: the run's coverage report.

:func:`compute` is pure and vectorised over the plan's rows, from the :class:`RunState`
``ops/coverage/read.py`` reads (formatting: ``render``). A file is done when
its shard is (``markers.DoneShards``) or its own marker exists; a task when all its
files are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.ops.coverage import failing, sites, skew
from shardwise.ops.coverage.read import RunState, load_state, plan_index
from shardwise.planner import inflight
from shardwise.run import (
    adaptation,
    claims,
    drift,
    fidelity,
    jobevents,
    markers,
    outputs,
    quarantine,
    ranges,
    skipped,
    statstable,
    throughput,
)
from shardwise.run import plan as run_plan
from shardwise.run.filestats import figure_fields

#: Category name for files the ``category_regex`` does not match.
UNMATCHED = "(unmatched)"


@dataclass(frozen=True, kw_only=True)
class CategoryCoverage:
    """Completion of one category, in tasks."""

    name: str
    tasks_total: int
    tasks_done: int
    percent: float
    flagged: bool


@dataclass(frozen=True, kw_only=True)
class Coverage:
    """The coverage report; every count is exact, percentages are 0-100."""

    name: str
    run_dir: str
    total_shards: int
    minimum_shard_index: int
    shards_total: int
    shards_done: int  # shards with a marker (empty shards included once marked)
    shards_empty: int  # shards without files in the plan
    shards_remaining: int  # shards_total - shards_done
    shards_failing: int  # not done, whose newest failure record is a failure
    tasks_total: int
    tasks_done: int
    files_total: int
    files_done: int
    bytes_total: int
    bytes_done: int
    docs_done: int
    #: Each figure with a coverage ``total`` (``filestats.figure``), summed over the
    #: labelled files' stats, by its key (``tokens_done``, ...); None without stats.
    totals: dict[str, int | float | None]
    categories: tuple[CategoryCoverage, ...]  # least covered first
    incomplete_shards: str  # range expression
    skew_flagged: tuple[str, ...]
    overall_percent: float  # tasks_done / tasks_total
    throughput: throughput.Throughput | None
    eta: throughput.Eta | None
    files_quarantined: int = 0
    tasks_quarantined: int = 0
    quarantined: tuple[quarantine.Entry, ...] = ()  # left out on purpose, with reasons
    data_quality: dict[str, int] = field(default_factory=dict)  # totals over labelled files
    #: Per classifier: how close the labels are to fp32's (over labelled files' stats).
    fidelity: tuple[fidelity.Fidelity, ...] = ()
    unreadable_markers: tuple[str, ...] = ()
    stale_markers: tuple[str, ...] = ()
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: Not done, last stopped by a signal (walltime, preemption, Ctrl-C): they run again.
    shards_interrupted: int = 0
    #: Why the failing shards failed: (reason, shards), most shards first.
    failing_reasons: tuple[tuple[str, tuple[int, ...]], ...] = ()
    #: What the store said when it stopped shards (not failing: no file is at fault).
    store_reasons: tuple[tuple[str, tuple[int, ...]], ...] = ()
    #: The files that failed in them: (file, shard, error), in file order.
    failing_files: tuple[tuple[str, int, str], ...] = ()
    #: Failing shards the store stopped (unreachable, throttled, refused): no file at fault.
    shards_store_stopped: int = 0
    #: Listed files input.glob matches that are neither inputs nor outputs (last listing).
    skipped: skipped.Skipped = field(default_factory=skipped.Skipped)
    drift: drift.InputDrift = field(default_factory=drift.InputDrift)
    copies: str = ""  # the two run.json copies disagree: how, and which to keep
    #: What the workflow's walltime adaptation changed (None: it never adapted).
    adapted: adaptation.Adaptation | None = None
    #: Preemptions, node failures, held and lost jobs of the run (job-events.jsonl).
    fates: jobevents.Tally = field(default_factory=jobevents.Tally)
    #: The format setting they were judged by (``input.format``).
    input_format: str = "auto"
    #: Per output kind, labelled files (with a marker) without that output; None when
    #: the output root was not listed (object stores: ``verify`` lists it).
    outputs_missing: dict[str, int] | None = None

    @property
    def tokens_done(self) -> int | None:
        """Classifier tokens labelled (None without stats)."""
        value = self.totals.get("tokens_done")
        return None if value is None else int(value)

    @property
    def recheck_share(self) -> float | None:
        """The share of the labelled files' engine time spent on the fp32 re-check of near
        ties (None without stats or engine time)."""
        engine, recheck = self.totals.get("engine_seconds"), self.totals.get("recheck_seconds")
        if not engine or recheck is None:
            return None
        return recheck / engine

    @property
    def tasks_left(self) -> int:
        """Planned tasks neither labelled nor quarantined (0 when the run is complete)."""
        return self.tasks_total - self.tasks_done - self.tasks_quarantined

    @property
    def shards_percent(self) -> float:
        """Shards done as a percentage."""
        return _percent(self.shards_done, self.shards_total)

    @property
    def files_percent(self) -> float:
        """Files done as a percentage."""
        return _percent(self.files_done, self.files_total)


def _outputs_missing(state: RunState) -> dict[str, int] | None:
    """Per kind a marker vouches for, the planned files with a marker but no such output."""
    if state.output_scan is None:
        return None
    labelled = set(state.plan["file"].to_pylist()) & set(state.output_scan.of(outputs.MARKER))
    found: dict[str, int] = {}
    for rel in labelled:
        for kind in outputs.wanted(rel, state.roots):
            if rel not in state.output_scan.of(kind):
                found[kind.name] = found.get(kind.name, 0) + 1
    return found


def _percent(done: float, total: float) -> float:
    return 100.0 * done / total if total else 100.0


def categorize(files: pa.Array | pa.ChunkedArray, category_regex: str) -> pa.Array:
    """Category of each file by ``category_regex``: first group, else the whole match."""
    pattern = re.compile(category_regex)
    matches = (pattern.search(rel) for rel in files.to_pylist())
    out = [UNMATCHED if m is None else m.group(1 if pattern.groups else 0) for m in matches]
    return pa.array(out, pa.string())


@dataclass(frozen=True, eq=False, kw_only=True)
class _Files:
    """Per plan row: its shard (relative to the minimum) and whether it is done."""

    rel_shard: np.ndarray  # int64
    in_range: np.ndarray  # bool: the row's shard is one of the run's
    shard_done: np.ndarray  # bool, per relative shard
    done: np.ndarray  # bool: labelled (shard marker, or its own marker)
    quarantined: np.ndarray  # bool: left out of the run (never done, never left to do)
    size: np.ndarray  # int64 bytes
    stats_row: np.ndarray  # int64 per stats row: its plan row (-1: not in the plan)


def _files(state: RunState) -> _Files:
    """Which planned files are done and which are left out, from the markers alone."""
    plan, total, minimum = state.plan, state.total_shards, state.minimum_shard_index
    rel_shard = plan["shard"].to_numpy().astype(np.int64) - minimum
    in_range = (rel_shard >= 0) & (rel_shard < total)
    shard_done = np.zeros(total, dtype=bool)
    shard_done[state.done_shards - minimum] = True
    done = np.zeros(plan.num_rows, dtype=bool)
    done[in_range] = shard_done[rel_shard[in_range]]
    if state.output_markers:
        done |= _in(plan["file"], state.output_markers)
    quarantined = np.zeros(plan.num_rows, dtype=bool)
    if state.quarantined:
        quarantined = _in(plan["file"], state.quarantined)
        done &= ~quarantined
    size = plan["size"].to_numpy().astype(np.int64)
    stats = state.stats
    stats_row = plan_index(plan, stats.file) if stats is not None else np.zeros(0, np.int64)
    return _Files(
        rel_shard=rel_shard,
        in_range=in_range,
        shard_done=shard_done,
        done=done,
        quarantined=quarantined,
        size=size,
        stats_row=stats_row,
    )


def _in(files: pa.ChunkedArray, names: Iterable[str]) -> np.ndarray:
    """Whether each of ``files`` is one of ``names``."""
    hit = pc.is_in(files, value_set=pa.array(sorted(names), pa.string()))
    return hit.to_numpy(zero_copy_only=False)


@dataclass(frozen=True)
class _Tasks:
    """Tasks done and left out, and each category's completion (least covered first)."""

    total: int
    done: int
    quarantined: int
    categories: tuple[CategoryCoverage, ...]

    @property
    def overall(self) -> float:
        """Share of the tasks done (1 when there are none)."""
        return self.done / self.total if self.total else 1.0


def _tasks(state: RunState, f: _Files, category_regex: str | None) -> _Tasks:
    """A task is done when none of its files is left; categories are per task."""
    plan = state.plan
    column = None if category_regex is None else categorize(plan["file"], category_regex)
    tasks = run_plan.task_index(plan, column)
    codes, n_tasks, names = tasks.file_task, len(tasks), tasks.categories
    task_done = np.bincount(codes, weights=~f.done, minlength=n_tasks) == 0
    task_quarantined = np.bincount(codes, weights=f.quarantined, minlength=n_tasks) > 0
    cat = tasks.task_category
    cat_total = np.bincount(cat, minlength=len(names))
    cat_done = np.bincount(cat, weights=task_done, minlength=len(names)).astype(int)
    done = int(task_done.sum())
    overall = done / n_tasks if n_tasks else 1.0
    task_shard = np.where(f.in_range, f.rel_shard, 0)[tasks.first_row]
    flags = skew.skew_flags(
        cat_done, cat_total, overall, skew.effective_tasks(cat, task_shard, len(names))
    )
    cats = sorted(
        (
            CategoryCoverage(
                name=names[i],
                tasks_total=int(cat_total[i]),
                tasks_done=int(cat_done[i]),
                percent=_percent(int(cat_done[i]), int(cat_total[i])),
                flagged=bool(flags[i]),
            )
            for i in range(len(names))
        ),
        key=lambda c: (c.percent, -c.tasks_total, c.name),
    )
    return _Tasks(n_tasks, done, int(task_quarantined.sum()), tuple(cats))


def _docs(state: RunState, f: _Files) -> int:
    """Documents labelled: a done shard's marker counts; per-file stats fill in files done
    in unfinished shards and markers without a count."""
    total = state.total_shards
    stat_docs = _per_file(state, f, "docs")
    rel = f.rel_shard[f.in_range]
    per_shard_stats = np.bincount(rel, weights=(stat_docs * f.done)[f.in_range], minlength=total)
    marker_docs = np.full(total, np.nan)
    marker_docs[state.markers.shard - state.minimum_shard_index] = state.markers.docs
    per_shard = np.where(f.shard_done & np.isfinite(marker_docs), marker_docs, per_shard_stats)
    return round(float(per_shard.sum()))


def _totals(state: RunState, f: _Files) -> dict[str, int | float | None]:
    """Each figure with a ``total``, summed over the labelled files' stats."""
    return {
        how.total: _rounded(float((_per_file(state, f, name) * f.done).sum()), how.digits)
        if state.stats is not None
        else None
        for name, how in figure_fields().items()
        if how.total is not None
    }


def _rounded(value: float, digits: int) -> int | float:
    """A total as its figure keeps it: whole, or to ``digits`` decimals."""
    return round(value, digits) if digits else round(value)


def _per_file(state: RunState, f: _Files, name: str) -> np.ndarray:
    """A number figure per plan row, 0 where no stats give it."""
    out = np.zeros(state.plan.num_rows)
    if state.stats is not None:
        known = f.stats_row >= 0
        out[f.stats_row[known]] = np.nan_to_num(state.stats.column(name)[known])
    return out


def _labelled_stats(state: RunState, f: _Files) -> tuple[dict[str, int], list[fidelity.Fidelity]]:
    """Data-quality totals and fidelity over the stats of labelled files."""
    stats = state.stats
    if stats is None:
        return {}, []
    idx = f.stats_row
    counted = np.zeros(idx.size, dtype=bool)
    counted[idx >= 0] = f.done[idx[idx >= 0]]
    return statstable.quality_totals(stats, counted), fidelity.totals(
        fidelity.rows(e) for e in stats.fidelity[counted]
    )


def _eta(
    state: RunState, rates: throughput.Throughput | None, f: _Files, gpus: int, per: str
) -> throughput.Eta | None:
    """Time left at ``gpus``: at the pace of the finished shard jobs (their wall seconds
    per input byte, start-up included), else at the labelling rate alone (by bytes when
    it knows them, else by files)."""
    left = ~f.done & ~f.quarantined
    labelling = None
    if rates is not None and rates.overall is not None:
        labelling = throughput.eta(int(f.size[left].sum()), rates, gpus, unit="bytes", per=per)
        if labelling is None:
            labelling = throughput.eta(int(left.sum()), rates, gpus, unit="files", per=per)
    sizes = np.bincount(
        f.rel_shard[f.in_range], weights=f.size[f.in_range], minlength=state.total_shards
    )
    done = {
        s - state.minimum_shard_index: t
        for s, t in state.job_seconds.items()
        if 0 <= s - state.minimum_shard_index < sizes.size
        and f.shard_done[s - state.minimum_shard_index]
    }
    shard_bytes = [float(sizes[s]) for s in done]
    remaining = float(f.size[left].sum())
    return throughput.paced(labelling, remaining, done.values(), shard_bytes, gpus, per)


def compute(
    state: RunState, *, category_regex: str | None = None, gpus: int | None = None
) -> Coverage:
    """Coverage of ``state``: pure, vectorised over the plan rows. ``category_regex``
    re-derives categories from the paths; ``gpus`` scales the ETA (None: the last run's)."""
    per = "GPU"
    if gpus is None:
        gpus, per = state.parallel
    total = state.total_shards
    f = _files(state)
    tasks = _tasks(state, f, category_regex)
    quality, fidelities = _labelled_stats(state, f)
    rates = throughput.summarize(state.stats) if state.stats is not None else None
    files_per_shard = np.bincount(f.rel_shard[f.in_range], minlength=total)
    incomplete = np.flatnonzero(~f.shard_done) + state.minimum_shard_index
    interrupted = sum(1 for r in state.last_failures.values() if r.interrupted)
    store_stopped = sum(r.kind == "storage" for r in state.last_failures.values())
    return Coverage(
        outputs_missing=_outputs_missing(state),
        name=state.name,
        run_dir=str(state.run_dir),
        total_shards=total,
        minimum_shard_index=state.minimum_shard_index,
        shards_total=total,
        shards_done=int(f.shard_done.sum()),
        shards_empty=int((files_per_shard == 0).sum()),
        shards_remaining=int(total - f.shard_done.sum()),
        shards_failing=int(state.failing_shards.size) - interrupted - store_stopped,
        shards_interrupted=interrupted,
        failing_reasons=failing.reasons_of(state.last_failures, interrupted=False),
        failing_files=failing.failing_files(state.last_failures),
        shards_store_stopped=store_stopped,
        store_reasons=failing.reasons_of(state.last_failures, interrupted=False, store=True),
        tasks_total=tasks.total,
        tasks_done=tasks.done,
        files_total=state.plan.num_rows,
        files_done=int(f.done.sum()),
        bytes_total=int(f.size.sum()),
        bytes_done=int(f.size[f.done].sum()),
        docs_done=_docs(state, f),
        totals=_totals(state, f),
        categories=tasks.categories,
        incomplete_shards=ranges.compress(incomplete.tolist()),
        skew_flagged=tuple(c.name for c in tasks.categories if c.flagged),
        overall_percent=100.0 * tasks.overall,
        throughput=rates,
        eta=_eta(state, rates, f, gpus, per),
        files_quarantined=int(f.quarantined.sum()),
        tasks_quarantined=tasks.quarantined,
        quarantined=tuple(sorted(state.quarantined.values(), key=lambda e: e.file)),
        data_quality=quality,
        fidelity=tuple(fidelities),
        unreadable_markers=state.unreadable_markers,
        stale_markers=state.stale_markers,
        changed=dict(state.changed),
        skipped=state.skipped,
        drift=state.drift,
        copies=state.copies,
        input_format=state.input_format,
        adapted=state.adapted,
        fates=jobevents.tally(state.job_events, state.loaded_at),
    )


@dataclass(frozen=True)
class Report:
    """``shardwise coverage``: the coverage and the shards live jobs hold right now."""

    coverage: Coverage
    in_flight: inflight.InFlight
    campaign: sites.CampaignView | None = None  # every site of a campaign (campaign.site)


def report(run_dir: Path, *, category_regex: str | None = None, gpus: int | None = None) -> Report:
    """The coverage of the run in ``run_dir``, with its in-flight shards (squeue only when
    the last invocation used a cluster executor or a claim names a SLURM job)."""
    cov = compute(load_state(run_dir), category_regex=category_regex, gpus=gpus)
    submitter = claims.Submitter.recorded(run_dir)
    flight = inflight.find(run_dir, submitter, done=markers.done_shards(run_dir))
    return Report(cov, flight, sites.view(run_dir))
