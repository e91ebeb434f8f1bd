"""``shardwise select``: the report of a selection, its picture and its ``dolma mix`` config.

Everything selected is *counted* (the shard records carry each domain's documents and
tokens: a file per shard is read, never one per source file). The mix config has one
stream per repeat: stream *i* keeps the documents taken at least *i* times, so the mixed
output holds each document as many times as it was selected.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.ops.common import picture
from shardwise.ops.common.text import human_count, left_out_line
from shardwise.ops.dolma import exact as dolma_exact
from shardwise.ops.dolma.mix import check_where_dolma_looks, mix_stream, mix_yaml
from shardwise.ops.select import plan as planning
from shardwise.ops.select.files import attributes_root, select_missing, select_shard
from shardwise.run import dolma, freshness, selection
from shardwise.run.opened import OpenRun, open_run
from shardwise.run.selection import SelectionPlan, ShardSelection

TIMES = " \u00d7 "
#: Report rows the table prints unless asked for all (JSON has every row).
TOP = 40


@dataclass(frozen=True, kw_only=True)
class Row:
    """One domain in the report."""

    labels: tuple[str, ...]
    target_share: float
    available_tokens: int
    target_tokens: float
    rate: float
    capped: bool
    selected_docs: int
    copies: int  # documents taken, with repeats
    selected_tokens: int  # tokens taken, with repeats (counted)
    selected_share: float
    shortfall_tokens: float  # target not reached (capped or empty domain)


@dataclass(frozen=True, kw_only=True)
class Report:
    """A selection's outcome, from its plan and its shard records."""

    name: str
    axes: tuple[str, ...]
    budget_tokens: int
    selected_tokens: int
    selected_docs: int
    copies: int
    max_repeat: int
    seed: int
    redistribute: bool
    partial: bool
    labelled_tasks: int
    population_tasks: int
    shards_selected: int
    shards_planned: int
    other_docs: int  # documents of labels no domain of the plan names
    rows: tuple[Row, ...]
    files_root: str
    mix_config: str | None = None  # where the dolma mix config was written
    mix_note: str | None = None  # why none was
    run_changed: str | None = None  # why it is stale (the run or its labels changed since)
    stale_files: dict[str, str] | None = None  # each file it read that changed, and how
    left_out: dict[str, str] | None = None  # files whose labels verify rejects: not read
    run_dir: str = ""

    @property
    def complete(self) -> bool:
        """Every shard of the plan is selected: the figures are final."""
        return self.shards_selected == self.shards_planned

    def to_dict(self) -> dict[str, Any]:
        """The JSON report."""
        out = asdict(self)
        out["complete"] = self.complete
        out["rows"] = [{**asdict(r), "labels": list(r.labels)} for r in self.rows]
        return out


def build(sel: SelectionPlan, got: dict[int, ShardSelection], files_root: str) -> Report:
    """The report of ``sel`` from the shard records ``got`` (pure)."""
    n = len(sel.domains)
    keys = ("selected_docs", "copies", "selected_tokens")
    sums = {k: np.zeros(n, np.int64) for k in keys}
    for record in got.values():
        for k in keys:
            sums[k] += np.asarray(getattr(record, k), np.int64)
    total = int(sums["selected_tokens"].sum())
    rows = tuple(
        Row(
            labels=d.labels,
            target_share=d.weight,
            available_tokens=d.available_tokens,
            target_tokens=d.target_tokens,
            rate=d.rate,
            capped=d.capped,
            selected_docs=int(sums["selected_docs"][i]),
            copies=int(sums["copies"][i]),
            selected_tokens=int(sums["selected_tokens"][i]),
            selected_share=float(sums["selected_tokens"][i] / total) if total else 0.0,
            shortfall_tokens=max(d.target_tokens - d.planned_tokens, 0.0),
        )
        for i, d in enumerate(sel.domains)
    )
    return Report(
        name=sel.name,
        axes=sel.axes,
        budget_tokens=sel.budget_tokens,
        selected_tokens=total,
        selected_docs=int(sums["selected_docs"].sum()),
        copies=int(sums["copies"].sum()),
        max_repeat=sel.max_repeat,
        seed=sel.seed,
        redistribute=sel.redistribute,
        partial=sel.partial,
        labelled_tasks=sel.labelled_tasks,
        population_tasks=sel.population_tasks,
        shards_selected=len(got),
        shards_planned=len(sel.shards),
        other_docs=sum(r.other_docs for r in got.values()),
        rows=rows,
        files_root=files_root,
    )


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def lines(r: Report, *, top: int | None = TOP) -> list[str]:
    """The report for the console: a headline, then one line per domain with a target
    or a selection (largest target first)."""
    scope = f" [from what is labelled: {r.labelled_tasks:,} of {r.population_tasks:,} tasks]"
    scope = scope if r.partial else ""
    text = f"selection {r.name!r}: {human_count(r.selected_tokens)} tokens selected of a "
    text += f"{human_count(r.budget_tokens)} budget ({r.selected_tokens / r.budget_tokens:.1%}), "
    text += f"{r.selected_docs:,} documents, {r.copies:,} with repeats (cap {r.max_repeat}, "
    head = [f"{text}seed {r.seed}){scope}"]
    if r.run_changed:
        head.append(f"  ! {r.run_changed}")
    if r.left_out:
        head.append(f"  ! {left_out_line(r.left_out, r.run_dir, _SELECT_ANEW)}")
    if not r.complete:
        text = f"  {r.shards_selected:,} of {r.shards_planned:,} shard(s) selected so far: the "
        text += "figures below grow until all are (shardwise select --name or snakemake select_all)"
        head.append(text)
    shown = [row for row in r.rows if row.target_share > 0 or row.selected_tokens > 0]
    shown.sort(key=lambda row: (-row.target_share, -row.selected_tokens, row.labels))
    width = max([len(TIMES.join(row.labels)) for row in shown] + [6])
    text = f"  {'domain':<{width}}  {'target':>7}  {'selected':>8}  {'available':>9}  "
    head.append(text + f"{'taken':>9}  {'rate':>6}")
    for row in shown[:top] if top else shown:
        flag = " capped: short " + human_count(row.shortfall_tokens) if row.capped else ""
        text = f"  {TIMES.join(row.labels):<{width}}  {_pct(row.target_share):>7}  "
        text += f"{_pct(row.selected_share):>8}  {human_count(row.available_tokens):>9}  "
        head.append(text + f"{human_count(row.selected_tokens):>9}  {row.rate:>6.3f}{flag}{scope}")
    if top and len(shown) > top:
        head.append(f"  ... {len(shown) - top} more domain(s) (all: --format json)")
    if r.mix_config:
        head.append(f"dolma mix config: {r.mix_config} (run it with `dolma -c {r.mix_config} mix`)")
    elif r.mix_note:
        head.append(f"no dolma mix config: {r.mix_note}")
    return head


def mix_config(
    ctx: OpenRun, sel: SelectionPlan, got: dict[int, ShardSelection], output: str
) -> tuple[dict[str, Any] | None, str | None]:
    """The ``dolma mix`` config of the selection, or why there is none."""
    attrs = attributes_root(ctx, sel.name)
    if attrs is None:
        why = "output.dolma is off in this run, so no repeat counts were written where dolma "
        return None, why + "mix reads them; the selection is in the files/ Parquet"
    check_where_dolma_looks(ctx.source, attrs, sel.name)
    most: dict[str, int] = {}
    for record in got.values():
        most.update(record.max_repeats)
    jsonl = {rel: k for rel, k in most.items() if dolma.applies(rel)}
    if not jsonl:
        return None, "no JSON Lines document was selected (dolma mix reads no Parquet)"
    key = selection.repeats_key(sel.name)
    try:
        present = {rel for rel, _ in attrs.list_files()}
        sets = dolma_exact.group(sorted(jsonl), present, *dolma_exact.corpus_matching(ctx.source))
    except ConfigError as e:
        return None, str(e)
    dolma_exact.write_extra_sets(attrs, sel.name, sets)
    streams = []
    for i in range(1, max(jsonl.values()) + 1):  # stream i: the documents taken >= i times
        taken = sets.only(lambda rel, i=i: jsonl[rel] >= i)
        include = [f".attributes.{key} >= {i}"]
        found = dolma_exact.streams(f"{sel.name}-{i}", ctx.source, sel.name, taken)
        streams += [mix_stream(s, documents, a, output, include) for s, documents, a in found]
    return {"streams": streams, "processes": 1}, None


#: What follows repairing the labels a selection left out.
_SELECT_ANEW = "select anew under another name"
#: Why a stale selection has no runnable mix config.
_STALE_MIX = "{} is kept refused by dolma mix (the config as it was: mix.yaml.stale beside it)"


def finish(run_dir: Path, sel: SelectionPlan, mix_output: str | None = None) -> Report:
    """The report of ``sel`` as far as it is selected; with every shard selected also
    its mix config (``mix.yaml``), ``report.json`` and the picture."""
    ctx = open_run(run_dir)
    got = selection.shard_records(ctx.run_dir, sel)
    base = selection.root(ctx.run_dir, sel.name)
    report = build(sel, got, str(base / selection.FILES_DIR))
    fresh = freshness.check(ctx, got.values())
    stale = planning.stale_note(ctx, sel, fresh)
    left_out = {rel: why for r in got.values() for rel, why in (r.left_out or {}).items()}
    report = Report(
        **{**vars(report), "run_changed": stale, "stale_files": fresh.changed}
        | {"left_out": left_out, "run_dir": str(ctx.run_dir)}
    )
    if stale is not None:  # never rewritten into a runnable config: kept refused
        selection.retire_mix_config(ctx.run_dir, sel.name, stale)
        return Report(**{**vars(report), "mix_note": _STALE_MIX.format(base / selection.MIX_YAML)})
    if not report.complete:
        return report
    config, note = mix_config(ctx, sel, got, mix_output or str(base.absolute() / "mix"))
    path = None
    if config is not None:
        path = base / selection.MIX_YAML
        path.write_text(mix_yaml(config, ctx.source.options))
    report = Report(**{**vars(report), "mix_config": str(path) if path else None, "mix_note": note})
    (base / "report.json").write_text(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    png = ctx.run_dir / "report" / f"selection-{sel.name}.png"
    png.parent.mkdir(parents=True, exist_ok=True)
    png.write_bytes(render_png(report))
    return report


def run(
    run_dir: Path,
    request: planning.Request | None,
    name: str,
    *,
    plan_only: bool = False,
    jobs: int = 4,
    mix_output: str | None = None,
    progress: bool = True,
) -> Report:
    """``shardwise select``: plan selection ``name`` (or take its saved plan), select
    every shard not selected yet here (unless ``plan_only``: ``snakemake select_all``
    does it as jobs), and report."""
    ctx = open_run(run_dir)
    planning.check_name(name)
    if name == ctx.settings.dolma_name:
        msg = f"--name {name!r} is the name of the run's own Dolma attributes (output.dolma."
        msg += "name): the selection's repeat counts would overwrite them; choose another name"
        raise ConfigError(msg)
    sel = planning.planned(ctx.run_dir, request, name)
    if not plan_only:
        select_missing(ctx, sel, jobs=jobs, progress=progress)
    return finish(ctx.run_dir, sel, mix_output)


def run_shard(run_dir: Path, name: str, shard: int) -> ShardSelection:
    """One shard's selection (the job of Snakemake's ``select_all``)."""
    return select_shard(open_run(run_dir), planning.check_name(name), shard)


def render_png(r: Report, top: int = 30) -> bytes:
    """Target against selected share per domain (the largest targets), as PNG bytes."""
    rows = sorted(
        (x for x in r.rows if x.target_share > 0 or x.selected_tokens),
        key=lambda x: -x.target_share,
    )[:top][::-1]
    fig = picture.figure((11.0, 2.0 + 0.32 * max(len(rows), 1)))
    ax = fig.add_axes((0.34, 0.08, 0.62, 0.80))
    y = np.arange(len(rows))
    ax.barh(y + 0.2, [100 * x.target_share for x in rows], 0.4, label="target", color="#9ab8d6")
    ax.barh(y - 0.2, [100 * x.selected_share for x in rows], 0.4, label="selected", color="#3b75af")
    ax.set_yticks(
        y, [TIMES.join(x.labels) + (" (capped)" if x.capped else "") for x in rows], fontsize=8
    )
    ax.set_xlabel("% of selected tokens")
    ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    title = (
        f"selection {r.name}: {human_count(r.selected_tokens)} of "
        f"{human_count(r.budget_tokens)} tokens, cap {r.max_repeat}"
    )
    if r.partial:
        title += f" (from {r.labelled_tasks:,} of {r.population_tasks:,} labelled tasks)"
    fig.text(0.02, 0.98, title, fontsize=12, fontweight="bold", va="top")
    return picture.png(fig)
