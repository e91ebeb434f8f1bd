"""``shardwise domains``: the corpus's label distribution while the run is going.

:func:`load` reads the plan, the done shards and one summary per finished shard (never a
file per source file); :func:`compute` picks a view (a classifier or a pair) and a weight
and hands arrays to the estimator. Tasks of done shards without a summary (finished
elsewhere) count as not labelled: still a random sample, only a smaller one, and said.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.config import weborganizer_labels
from shardwise.errors import DomainsError
from shardwise.ops.common.text import left_out_line
from shardwise.ops.domains.estimate import Estimate, Population, Sample, estimate
from shardwise.run import opened, summaries
from shardwise.run import plan as run_plan
from shardwise.run.labelcounts import pair_key

WEIGHTS = ("docs", "bytes", "tokens")
TIMES = " \u00d7 "  # between the classifiers of a pair, as in "topic x format"


@dataclass(frozen=True, eq=False, kw_only=True)
class DomainData:
    """Everything read from the run directory, once."""

    run_dir: Path
    name: str
    total_shards: int
    shards_done: int
    shards_unsummarized: int  # done, with tasks, without a summary
    tasks_unsummarized: int  # their tasks (counted as not labelled)
    categories: list[str]
    task_ids: list[str]
    task_category: np.ndarray  # int64
    task_bytes: np.ndarray  # float64 (plan)
    in_population: np.ndarray  # bool: not quarantined
    quarantined_tasks: int
    summaries: list[summaries.Summary]
    task_index: list[np.ndarray]  # per summary: its task -> global task index (-1: unknown)
    incomplete_tasks: int  # tasks of summarized shards with a file lacking counts
    #: Files whose labels are not the run's (another model or set-up than run.json pins,
    #: found by their shard's job): not counted, and why.
    rejected_files: dict[str, str] = field(default_factory=dict)

    def views(self) -> list[str]:
        """Views present in the summaries, classifiers first, in first-seen order."""
        seen: dict[str, None] = {}
        for s in self.summaries:
            for v in s.views:
                seen.setdefault(v, None)
        return sorted(seen, key=lambda v: ("," in v, list(seen).index(v)))

    def pairs(self) -> list[str]:
        """The pair views (``a,b``)."""
        return [v for v in self.views() if "," in v]


def load(run: Path | opened.OpenRun) -> DomainData:
    """Read plan, markers, summaries and quarantine of the run (opened, or its directory)."""
    pinned = (
        run if isinstance(run, opened.OpenRun) else opened.open_run(run, settings_required=False)
    )
    run_dir, meta, plan = pinned.run_dir, pinned.meta, pinned.plan
    tasks = run_plan.task_index(plan)
    task_names, task_codes, n_tasks = tasks.task_ids, tasks.file_task, len(tasks)
    task_shard = tasks.task_shard

    quarantined = set(pinned.quarantined)
    in_population = np.ones(n_tasks, bool)
    if quarantined:
        hit = pc.is_in(plan["file"], value_set=pa.array(sorted(quarantined), pa.string()))
        bad = np.unique(task_codes[hit.to_numpy(zero_copy_only=False)])
        in_population[bad] = False

    done = pinned.done.shards
    have = summaries.summarized_shards(run_dir) & done
    got, _ = summaries.read_many(run_dir, sorted(have))  # unreadable: as if absent
    read_ok = {s.shard for s in got}
    without = np.array(sorted(done - read_ok), np.int64)
    tasks_without = int(np.isin(task_shard, without).sum()) if without.size else 0
    shards_without = int(np.unique(task_shard[np.isin(task_shard, without)]).size)
    index = {t: i for i, t in enumerate(task_names)}
    task_index = [np.array([index.get(t, -1) for t in s.task_ids], np.int64) for s in got]
    return DomainData(
        run_dir=run_dir,
        name=run_dir.resolve().name,
        total_shards=meta.total_shards,
        shards_done=len(done),
        shards_unsummarized=shards_without,
        tasks_unsummarized=tasks_without,
        categories=tasks.categories,
        task_ids=task_names,
        task_category=tasks.task_category,
        task_bytes=tasks.task_bytes,
        in_population=in_population,
        quarantined_tasks=int((~in_population).sum()),
        summaries=got,
        task_index=task_index,
        incomplete_tasks=sum(len(s.incomplete_tasks) for s in got),
        rejected_files={rel: why for s in got for rel, why in s.rejected_files.items()},
    )


@dataclass(frozen=True, eq=False, kw_only=True)
class Domains:
    """One view's estimate, with what it was computed from."""

    data: DomainData
    view: str  # classifier name, or "a,b"
    axes: tuple[str, ...]  # (classifier,) or (a, b)
    labels: tuple[list[str], ...]  # label names per axis (global order)
    weight: str  # docs | bytes
    est: Estimate
    cell_labels: list[tuple[str, ...]]  # per cell, its label per axis
    notes: list[str] = field(default_factory=list)

    @property
    def percent_done(self) -> float:
        """Labelled tasks as a percentage of the population."""
        return 100.0 * self.est.fraction_labelled


def require_labels(data: DomainData) -> None:
    """Refuse (DomainsError) a run with no finished shard, or none with label counts."""
    if data.shards_done == 0:
        msg = f"no shard of {data.run_dir} is done yet (0 of {data.total_shards:,}); "
        raise DomainsError(msg + "run this again when shards finish")
    if not data.summaries and not data.shards_unsummarized:
        msg = f"no file of {data.run_dir} is labelled yet: the {data.shards_done:,} shard(s) "
        msg += "marked done have no files (empty shards are marked done at planning); run this "
        raise DomainsError(msg + "again when shards finish")
    if not data.summaries:
        msg = f"none of the {data.shards_unsummarized:,} finished shard(s) with files of "
        msg += f"{data.run_dir} has a readable summary ({data.run_dir / summaries.SUMMARIES_DIR}"
        msg += "/<shard>.arrow): a shard marked done because its files were labelled elsewhere "
        msg += "(another cluster, `source: remote`) or by a version without label counts has "
        raise DomainsError(msg + "none; shards this run finishes will have one")


def choose_view(data: DomainData, pair: str | None, classifier: str | None) -> str:
    views = data.views()
    if not views:
        msg = f"{data.run_dir}: none of the {data.shards_done:,} finished shards has label "
        msg += "counts yet (summaries/ is empty); they appear as shards finish with this "
        raise DomainsError(msg + "version of shardwise")
    if pair is not None:
        a, _, b = pair.partition(",")
        if not a or not b or "," in b:
            msg = f"--pair {pair!r}: give two classifier names, e.g. --pair topic,format"
            raise DomainsError(msg)
        key = pair_key((a.strip(), b.strip()))
        if key in views:
            return key
        singles = [v for v in views if "," not in v]
        unknown = [n for n in (a, b) if n.strip() not in singles]
        if unknown:
            msg = f"--pair {pair}: unknown classifier(s) {', '.join(unknown)}; "
            msg += f"the classifiers are {', '.join(singles)}"
        else:
            msg = f"--pair {pair}: this pair's joint counts were not kept (config domains.pairs); "
            msg += f"pairs available: {', '.join(data.pairs()) or 'none'}"
        raise DomainsError(msg)
    if classifier is not None:
        if classifier in views and "," not in classifier:
            return classifier
        singles = ", ".join(v for v in views if "," not in v)
        msg = f"--classifier {classifier}: unknown classifier; the classifiers are {singles}"
        raise DomainsError(msg)
    return (data.pairs() or views)[0]


def _sample(data: DomainData, view: str, weight: str) -> tuple[Sample, tuple[list[str], ...], str]:
    """Gather the view's rows from every summary into one sparse sample: per summary only
    small lookups, then all rows mapped in a few vectorised passes."""
    axes = tuple(view.split(","))
    labels: tuple[dict[str, int], ...] = tuple({} for _ in axes)
    remaps: dict[tuple[int, tuple[str, ...]], np.ndarray] = {}
    n_tasks = len(data.task_ids)
    labelled = np.zeros(n_tasks, bool)
    totals = np.zeros(n_tasks)
    docs = np.zeros(n_tasks)
    tables: list[pa.Table] = []
    tmaps: list[np.ndarray] = []
    label_maps: list[list[np.ndarray]] = [[] for _ in axes]
    missing_view = 0
    for s, tmap in zip(data.summaries, data.task_index, strict=True):
        if view not in s.views:
            missing_view += 1
            continue
        known = tmap >= 0
        labelled[tmap[known]] = True
        total = {"docs": s.task_docs, "bytes": s.task_bytes}.get(weight, s.task_tokens)
        if total is None:  # tokens not counted there (compute refuses that first)
            raise DomainsError(f"shard {s.shard}: no token counts")
        totals[tmap[known]] = total[known]
        docs[tmap[known]] = s.task_docs[known]
        tables.append(s.view_cells(view))
        tmaps.append(tmap)
        for axis, name in enumerate(axes):
            names = tuple(s.labels.get(name, ()))
            key = (axis, names)
            if key not in remaps:  # usually one label list for the whole run
                index = labels[axis]
                remaps[key] = np.array([index.setdefault(n, len(index)) for n in names], np.int64)
            label_maps[axis].append(remaps[key])
    widths = [max(len(d), 1) for d in labels]
    task, cell, value = _rows_of_view(tables, tmaps, label_maps, widths, weight)
    note = ""
    if missing_view:
        note = f"{missing_view:,} finished shard(s) have no {view} counts (written before "
        note += "this pair was configured): their tasks count as not labelled"
    n_cells = int(np.prod(widths))
    # Quarantined tasks leave the population: drop them and renumber.
    keep_task = data.in_population
    new_index = np.cumsum(keep_task) - 1
    row_keep = keep_task[task] & (value > 0)
    if not row_keep.all():
        task, cell, value = task[row_keep], cell[row_keep], value[row_keep]
    cell_task = task if keep_task.all() else new_index[task]
    sample = Sample(
        labelled=labelled[keep_task],
        task_total=totals[keep_task],
        cell_task=cell_task,
        cell=cell,
        value=value,
        n_cells=n_cells,
        task_docs=docs[keep_task],
    )
    return sample, tuple(list(d) for d in labels), note


def _offsets(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenation of ``parts`` and where each part starts in it."""
    starts = np.cumsum([0, *(p.size for p in parts)])[:-1].astype(np.int64)
    flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return flat, starts


def _rows_of_view(
    tables: list[pa.Table],
    tmaps: list[np.ndarray],
    label_maps: list[list[np.ndarray]],
    widths: list[int],
    weight: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(global task, cell, value) of every row of one view's slices, vectorised."""
    if not tables:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    sizes = np.array([t.num_rows for t in tables], np.int64)
    part = np.repeat(np.arange(len(tables)), sizes)
    big = pa.concat_tables(tables)
    tmap, tstart = _offsets(tmaps)
    task = tmap[tstart[part] + big.column("task").to_numpy()]
    cell = np.zeros(task.size, np.int64)
    for axis, col in enumerate(("a", "b")[: len(label_maps)]):
        local = big.column(col).to_numpy()
        first = label_maps[axis][0]
        if all(m is first for m in label_maps[axis]) and (first == np.arange(first.size)).all():
            cell = cell * widths[axis] + local  # every shard saw the same labels: no remap
        else:
            lmap, lstart = _offsets(label_maps[axis])
            cell = cell * widths[axis] + lmap[lstart[part] + local]
    value = big.column(weight).to_numpy().astype(np.float64)
    keep = task >= 0
    if keep.all():  # tasks missing from the plan: only after a re-plan
        return task, cell, value
    return task[keep], cell[keep], value[keep]


def view(
    run_dir: Path,
    *,
    pair: str | None = None,
    classifier: str | None = None,
    weight: str | None = "docs",
    fmt: str = "table",
) -> Domains:
    """``shardwise domains``: load the run, refuse one with nothing labelled, estimate
    (``weight`` None: the default for ``fmt``, see :func:`default_weight`)."""
    data = load(run_dir)
    require_labels(data)
    weight = weight or default_weight(data, fmt)
    return compute(data, pair=pair, classifier=classifier, weight=weight)


def compute(
    data: DomainData,
    *,
    pair: str | None = None,
    classifier: str | None = None,
    weight: str = "docs",
) -> Domains:
    """Estimate one view (default: the first pair, else the first classifier)."""
    if weight not in WEIGHTS:
        raise DomainsError(f"weight must be one of {', '.join(WEIGHTS)}, got {weight!r}")
    view = choose_view(data, pair, classifier)
    if weight == "tokens":
        require_tokens(data)
    sample, labels, note = _sample(data, view, weight)
    keep = data.in_population
    pop = Population(data.categories, data.task_category[keep], data.task_bytes[keep])
    est = estimate(pop, sample)
    widths = [max(len(x), 1) for x in labels]  # a cell's index: its labels, first most significant
    cell_labels = [
        tuple(labels[axis][i] if i < len(labels[axis]) else "" for axis, i in enumerate(ix))
        for ix in zip(*np.unravel_index(np.arange(sample.n_cells), widths), strict=True)
    ]
    notes = [*est.warnings, *([note] if note else [])]
    if data.tasks_unsummarized:
        text = f"{data.tasks_unsummarized:,} task(s) in {data.shards_unsummarized:,} finished "
        text += "shard(s) without a summary (finished elsewhere or before label counts existed)"
        notes.append(text + " count as not labelled")
    if data.incomplete_tasks:
        text = f"{data.incomplete_tasks:,} task(s) of finished shards have a file without "
        notes.append(text + "label counts: counted as not labelled")
    if data.rejected_files:
        then = "`shardwise domains` again (the shards count them anew)"
        notes.append(left_out_line(data.rejected_files, str(data.run_dir), then))
    if data.quarantined_tasks:
        text = f"{data.quarantined_tasks:,} task(s) with quarantined files are left out of "
        notes.append(text + "the corpus (quarantine.json)")
    return Domains(
        data=data,
        view=view,
        axes=tuple(view.split(",")),
        labels=labels,
        weight=weight,
        est=est,
        cell_labels=cell_labels,
        notes=notes,
    )


def default_weight(data: DomainData, fmt: str) -> str:
    """``docs``; for ``--format weborganizer`` ``tokens`` when every finished shard
    counted them (WebOrganizer weighs domains by tokens)."""
    if fmt != "weborganizer":
        return "docs"
    counted = data.summaries and all(s.task_tokens is not None for s in data.summaries)
    return "tokens" if counted else "docs"


def require_tokens(data: DomainData, what: str = "--weight tokens", *, others: bool = True) -> None:
    """Refuse ``what`` (weighing by tokens) where a finished shard counted none."""
    without = sum(1 for s in data.summaries if s.task_tokens is None)
    if without:
        msg = f"{what}: {without:,} of the {len(data.summaries):,} finished shard(s) of "
        msg += f"{data.run_dir} counted no tokens: set domains.tokenizer (the tokenizer of the "
        msg += "model being trained) before labelling"
        msg += "; --weight docs or bytes work without it" if others else ""
        raise DomainsError(msg)


def weborganizer_ids() -> dict[str, dict[str, int]]:
    """WebOrganizer's label ids, by label set: ``{"topic": {name: id}, "format": {...}}``."""
    labels = weborganizer_labels()
    return {kind: {n: i for i, n in enumerate(names)} for kind, names in labels.items()}
