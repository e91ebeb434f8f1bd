"""The coverage report as text: a table for terminals, Markdown, and the JSON document.

Pure functions of a :class:`~shardwise.ops.coverage.compute.Coverage`; nothing here reads a file.
"""

import math
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from shardwise.ops.common.text import format_duration, human_bytes, human_count
from shardwise.ops.coverage.compute import CategoryCoverage, Coverage, Report
from shardwise.run import changes, fidelity, outputs, ranges, throughput

#: Coverage fields written to JSON as they are (the rest are shaped below).
_PLAIN = (
    "name", "run_dir", "total_shards", "minimum_shard_index", "shards_total", "shards_done",
    "shards_empty", "shards_remaining", "shards_failing", "shards_interrupted", "tasks_total",
    "tasks_done", "files_total", "files_done", "bytes_total", "bytes_done", "docs_done",
    "incomplete_shards", "files_quarantined", "tasks_quarantined", "tasks_left",
    "shards_store_stopped",
    "outputs_missing",
)  # fmt: skip


def to_dict(cov: Coverage) -> dict[str, Any]:
    """The JSON document (schema: docs/schemas/coverage.schema.json)."""
    out: dict[str, Any] = {"format_version": 1, **{k: getattr(cov, k) for k in _PLAIN}}
    out.update(cov.totals)  # tokens_done, and any other figure's total
    share = cov.recheck_share
    out.update(
        recheck_share=None if share is None else round(share, 4),
        percent_done=round(cov.overall_percent, 3),
        skew_flagged=list(cov.skew_flagged),
        categories={
            c.name: {
                "tasks_total": c.tasks_total,
                "tasks_done": c.tasks_done,
                "percent": round(c.percent, 3),
                "flagged": c.flagged,
            }
            for c in cov.categories
        },
        quarantined=[asdict(e) for e in cov.quarantined],
        data_quality=dict(cov.data_quality),
        fidelity=[_fidelity_dict(f) for f in cov.fidelity],
        unreadable_markers=list(cov.unreadable_markers),
        stale_markers=list(cov.stale_markers),
        changed_files={rel: {"planned": a, "now": b} for rel, (a, b) in cov.changed.items()},
        skipped_files={"count": cov.skipped.count, "examples": list(cov.skipped.examples)},
        run_json_copies=cov.copies,
        input_drift=cov.drift.counted(),
        walltime_adaptation=_adaptation_dict(cov),
        job_fates=asdict(cov.fates),
        failing_reasons=[{"reason": r, "shards": list(s)} for r, s in cov.failing_reasons],
        store_reasons=[{"reason": r, "shards": list(s)} for r, s in cov.store_reasons],
        failing_files=[{"file": f, "shard": s, "error": e} for f, s, e in cov.failing_files],
    )
    if cov.throughput is not None and cov.throughput.overall is not None:
        devices = {d.device_name: _rate_dict(d) for d in cov.throughput.devices}
        out["throughput"] = {"overall": _rate_dict(cov.throughput.overall), "devices": devices}
    if cov.eta is not None:
        out["eta"] = {**asdict(cov.eta), "seconds": round(cov.eta.seconds, 1)}
    return out


def _fidelity_dict(f: fidelity.Fidelity) -> dict[str, Any]:
    """Shares, not the raw sums: the sums' denominators differ per classifier."""
    out = {k: v for k, v in asdict(f).items() if k not in ("residual", "residual_upper")}
    return {
        **out,
        "fp32_share": round(f.fp32_share, 6),
        "residual_share": f.residual_share,
        "residual_upper_share": f.residual_upper_share,
        "flagged": f.flagged,
    }


def _rate_dict(rate: throughput.DeviceRate) -> dict[str, Any]:
    def pct(p: throughput.Percentiles | None) -> dict[str, float] | None:
        return None if p is None else {"p10": p.p10, "median": p.median, "p90": p.p90}

    return {
        "files": rate.files,
        "gpu_seconds": rate.seconds,
        "docs_per_s": pct(rate.docs_per_s),
        "tokens_per_s": pct(rate.tokens_per_s),
        "bytes_per_s": pct(rate.bytes_per_s),
        "files_per_hour": _finite(rate.files_per_hour),
        "docs_per_s_total": _finite(rate.docs_per_s_total),
        "bytes_per_s_total": rate.bytes_per_s_total,
    }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def shorten(expr: str, limit: int = 160) -> str:
    """A range expression cut at a comma before ``limit`` characters, saying where the rest is."""
    if len(expr) <= limit:
        return expr
    cut = expr.rfind(",", 0, limit)
    return expr[: cut if cut > 0 else limit] + ",... (`shardwise retry-array` lists all)"


def summary_lines(cov: Coverage, *, max_expression: int = 160) -> list[str]:
    """The headline lines shared by the table, markdown and HTML formats."""
    lines = [
        f"shards   {cov.shards_done:,} / {cov.shards_total:,} done ({cov.shards_percent:.1f}%)"
        f"   {cov.shards_remaining:,} remaining   {cov.shards_empty:,} empty"
        + (f"   {cov.shards_failing:,} failing" if cov.shards_failing else "")
        + (
            f"   {cov.shards_store_stopped:,} stopped by the store"
            if cov.shards_store_stopped
            else ""
        )
        + (f"   {cov.shards_interrupted:,} interrupted" if cov.shards_interrupted else ""),
        f"tasks    {cov.tasks_done:,} / {cov.tasks_total:,} ({cov.overall_percent:.1f}%)",
        f"files    {cov.files_done:,} / {cov.files_total:,} ({cov.files_percent:.1f}%)"
        f"   {human_bytes(cov.bytes_done)} / {human_bytes(cov.bytes_total)}",
        f"labelled {human_count(cov.docs_done)} docs"
        + (f"   {human_count(cov.tokens_done)} tokens" if cov.tokens_done is not None else ""),
    ]
    lines += quality_lines(cov.data_quality, cov.docs_done)
    if cov.recheck_share:
        lines.append(
            f"re-check {100 * cov.recheck_share:.1f}% of engine time re-ran near ties in "
            "float32 (inference.recheck_margin; docs/engine.md)"
        )
    lines += fidelity_lines(cov.fidelity)
    lines += failing_lines(cov)
    lines += _state_lines(cov)
    lines += _rate_lines(cov)
    if cov.skew_flagged:
        worst = ", ".join(f"{c.name} ({c.percent:.1f}%)" for c in cov.categories if c.flagged)
        n = len(cov.skew_flagged)
        text = f"skew     {n} categor{'y' if n == 1 else 'ies'}"
        text += f" outside the 99% band of the overall {cov.overall_percent:.1f}%: {worst}"
        lines.append(text)
    if cov.incomplete_shards:
        left = f"shards {shorten(cov.incomplete_shards, max_expression)}"
    elif cov.tasks_left > 0:
        left = f"{cov.tasks_left:,} planned task(s) are not labelled although every shard is "
        left += "marked done: `shardwise verify --run-dir <run_dir>` names them"
    elif cov.drift.added:
        left = f"every planned shard is done, but {cov.drift.added:,} file(s) in the input are "
        left += "not in the run yet (see `input` above)"
    else:
        left = "nothing: every shard is done"
    return [*lines, f"left     {left}"]


def _state_lines(cov: Coverage) -> list[str]:
    """Files left out, changed in place, and markers that count as not done (each with its fix)."""
    lines: list[str] = []
    if cov.quarantined:
        shown = "; ".join(f"{e.file} ({e.reason})" for e in cov.quarantined[:3])
        more = f"; ... {len(cov.quarantined) - 3} more" if len(cov.quarantined) > 3 else ""
        text = f"quarantined {cov.files_quarantined:,} file(s) left out of the run, not labelled: "
        lines.append(text + f"{shown}{more} (`shardwise quarantine --list`)")
    lines += changes.lines(cov.changed, Path(cov.run_dir))
    lines += cov.skipped.lines(cov.input_format)
    lines += cov.drift.lines()
    lines += _adaptation_lines(cov)
    lines += _fate_lines(cov)
    lines += [f"run.json {cov.copies}"] if cov.copies else []
    if cov.stale_markers:
        text = f"stale    {len(cov.stale_markers):,} shard marker(s) do not match the plan "
        text += f"(another assignment, e.g. {cov.stale_markers[0]}) and count as not done; "
        lines.append(text + "`snakemake -n` removes them")
    if cov.outputs_missing:
        lines.append(_missing_outputs_line(cov))
    if cov.unreadable_markers:
        text = f"unreadable {len(cov.unreadable_markers):,} marker(s) count as not done "
        text += f"(e.g. {cov.unreadable_markers[0]}); `shardwise verify --repair` clears them"
        lines.append(text)
    return lines


def _rate_lines(cov: Coverage) -> list[str]:
    """Throughput per GPU type, and the ETA while anything is left."""
    lines: list[str] = []
    for dev in cov.throughput.devices if cov.throughput is not None else ():
        d = dev.docs_per_s
        rate = f"{d.median:,.0f} docs/s/GPU (p10 {d.p10:,.0f}, p90 {d.p90:,.0f})" if d else None
        text = f"rate     {dev.device_name}: {rate or 'docs/s unknown'}, "
        lines.append(text + f"{dev.files_per_hour:,.1f} files/h/GPU  [{dev.files:,} files]")
    eta = cov.eta
    if eta is not None and eta.remaining > 0:
        lines.append(eta_line(eta))
    return lines


def eta_line(eta: throughput.Eta) -> str:
    """The ETA, with the pace it rests on: finished shard jobs (start-up included), or,
    before any finished, unknown, with the labelling-only time it would not exceed."""
    if eta.unit == "bytes":
        left, per = human_bytes(eta.remaining), f"{human_bytes(eta.rate_per_gpu)}/s"
    else:
        left, per = f"{eta.remaining:,.0f} files", f"{eta.rate_per_gpu * 3600:,.1f} files/h"
    on = f"on {eta.gpus} {eta.per}{'s' if eta.gpus != 1 else ''}"
    if eta.basis == "labelling":
        text = "ETA      unknown until a shard job finishes (start-up and model loading are "
        text += f"not measured yet); labelling alone: {format_duration(eta.seconds)} {on} "
        return text + f"({left} left at {per} per {eta.per})"
    text = f"ETA      {format_duration(eta.seconds)} {on} at the pace of {eta.jobs:,} finished "
    text += f"shard job(s) ({format_duration(eta.seconds_per_job or 0)} each, start-up and model "
    text += f"loading included: {per} per {eta.per}; {left} left)"
    if eta.labelling_seconds is not None:
        text += f"; labelling alone: {format_duration(eta.labelling_seconds)}"
    return text


def fidelity_lines(fidelities: Iterable[fidelity.Fidelity]) -> list[str]:
    """Per classifier: the share labelled from fp32 and the estimated share of labels that
    differ from an fp32 run (with its 95% bound); flagged above the target (0.1%), and
    where a pinned ``recheck_margin`` was found too small. Nothing for an fp32 run."""
    lines = []
    for f in fidelities:
        if f.fp32_docs == f.docs and not f.fallback_files and not f.unmeasured_docs:
            continue  # computed in fp32: nothing to say
        said = [f"{100 * f.fp32_share:.1f}% labelled from fp32"]
        if f.docs > f.unmeasured_docs:
            text = f"est. {_share(f.residual_share)} differ from fp32 "
            said.append(text + f"(95% bound {_share(f.residual_upper_share)})")
        if f.unmeasured_docs:
            said.append(f"{f.unmeasured_docs:,} docs under a pinned recheck_margin: not measured")
        if f.fallback_files:
            said.append(f"{f.fallback_files:,} file(s) run wholly in fp32 (bf16 bought nothing)")
        flag = f"  ! above {_share(fidelity.TARGET_RESIDUAL)}" if f.flagged else ""
        if f.too_small_files:
            flag = "  ! the pinned recheck_margin is too small for this model in "
            flag += f"{f.too_small_files:,} file(s): use inference.recheck_margin: auto"
        if f.on_cpu_files:
            flag += f"  ! {f.on_cpu_files:,} file(s) in half precision on a CPU (inference.device "
            flag += "auto found no GPU): slower than float32; inference.dtype: auto avoids it"
        lines.append(f"fidelity {f.classifier}: " + ", ".join(said) + flag)
    return lines


def _share(x: float) -> str:
    if x == 0:
        return "0%"
    if x < 1e-6:
        return "<0.0001%"
    return f"{100 * x:.4f}%" if x < 0.001 else f"{100 * x:.2f}%"


def failing_lines(cov: Coverage, shown: int = 3) -> list[str]:
    """Why shards fail (a reason per line, with its shards) and which files, with the way
    to leave out a file that cannot be fixed; interrupted shards are not failing."""
    lines = [
        f"failing  {len(shards):,} shard(s) (shards {ranges.compress(list(shards))}): {reason}"
        for reason, shards in cov.failing_reasons[:shown]
    ]
    if len(cov.failing_reasons) > shown:
        hidden = len(cov.failing_reasons) - shown
        lines.append(f"failing  ... {hidden} more reason(s) (--format json)")
    for reason, shards in cov.store_reasons[:shown]:
        text = f"store    {len(shards):,} shard(s) (shards {ranges.compress(list(shards))}) "
        lines.append(text + f"stopped because the store did not answer: {reason}")
    if cov.shards_store_stopped:
        text = "store    no file of theirs is at fault: run again once the store answers "
        lines.append(text + "(`snakemake -n` lists the input through it)")
    if cov.failing_files:
        named = "; ".join(f"{rel} (shard {shard})" for rel, shard, _e in cov.failing_files[:shown])
        hidden = len(cov.failing_files) - shown
        more = f"; ... {hidden} more (all: --format json, failing_files)" if hidden > 0 else ""
        text = f"files    {len(cov.failing_files):,} failing: {named}{more}. Fix a file and run "
        text += f"again, or leave it out: `shardwise quarantine --run-dir {cov.run_dir} FILE "
        lines.append(text + "--reason TEXT`")
    if cov.shards_interrupted:
        text = f"interrupted {cov.shards_interrupted:,} shard(s) were stopped by a signal "
        text += "(walltime, preemption, Ctrl-C): finished files stay done, they run again"
        lines.append(text)
    return lines


#: Share of labelled documents without text above which the data line is flagged.
NO_TEXT_WARN = 0.05


def quality_lines(quality: dict[str, int], docs: int) -> list[str]:
    """The data-quality line: what the labelled documents lacked, as counts and shares
    (a run whose text field was missing in 30% of rows must not look clean)."""
    if not quality:
        return []

    def share(n: int) -> str:
        return f" ({100 * n / docs:.1f}%)" if docs else ""

    kinds = (
        ("missing_text", "missing the field"),
        ("null_texts", "null"),
        ("empty_texts", "empty or whitespace only"),
    )
    no_text = sum(quality.get(key, 0) for key, _what in kinds)
    parts = []
    if no_text:
        said = [f"{quality.get(key, 0):,} {what}" for key, what in kinds[:2]]
        said += [f"{quality[key]:,} {what}" for key, what in kinds[2:] if quality.get(key)]
        parts.append(f"{no_text:,} without text{share(no_text)}: " + ", ".join(said))
    pairs = (
        ("non_string_texts", "non-string texts read as strings"),
        ("missing_id", "missing the id field"),
        ("null_ids", "null ids"),
        ("duplicate_ids", "duplicate ids"),
        ("missing_url", "missing the url field"),
        ("null_urls", "null urls"),
        ("invalid_utf8_lines", "JSONL lines with invalid UTF-8 (replaced)"),
        ("invalid_utf8_values", "Parquet values with invalid UTF-8 (replaced)"),
        ("utf8_bom_lines", "UTF-8 byte-order marks dropped"),
        ("truncated_docs", "truncated at max_length"),
    )
    parts += [f"{quality[k]:,} {what}" for k, what in pairs if quality.get(k)]
    line = "data     " + "; ".join(parts)
    if docs and no_text / docs > NO_TEXT_WARN:
        line += "  ! check input.text_field"
    return [line]


def _category_rows(cov: Coverage, limit: int) -> tuple[list[CategoryCoverage], str]:
    """The least-covered ``limit`` categories plus every flagged one; a note on the rest.

    A run can have thousands of categories; the least covered and the flagged ones are
    the ones a person acts on.
    """
    shown = [c for i, c in enumerate(cov.categories) if i < limit or c.flagged]
    hidden = [c for i, c in enumerate(cov.categories) if i >= limit and not c.flagged]
    if not hidden:
        return shown, ""
    low = min(c.percent for c in hidden)
    return shown, f"... {len(hidden):,} more categories, all at {low:.1f}% or more"


def format_table(cov: Coverage, *, max_categories: int = 40) -> str:
    """Plain-text report for terminals and the dry-run printout."""
    lines = [f"coverage of run {cov.name} ({cov.run_dir})", *summary_lines(cov), ""]
    shown, hidden = _category_rows(cov, max_categories)
    width = max([len("category"), *(len(c.name) for c in shown)])
    lines.append(f"{'category':<{width}}  {'done':>10}  {'tasks':>10}  {'%':>6}")
    for c in shown:
        flag = "  ! skew" if c.flagged else ""
        counts = f"{c.tasks_done:>10,}  {c.tasks_total:>10,}  {c.percent:>5.1f}%"
        lines.append(f"{c.name:<{width}}  {counts}{flag}")
    if hidden:
        lines.append(hidden)
    return "\n".join(lines)


def format_markdown(cov: Coverage, *, max_categories: int = 40) -> str:
    """GitHub-flavoured Markdown, for issues and job summaries."""
    out = [f"### Coverage of run `{cov.name}`", "", "```", *summary_lines(cov), "```", ""]
    out += ["| category | done | tasks | % | skew |", "| --- | ---: | ---: | ---: | :---: |"]
    shown, hidden = _category_rows(cov, max_categories)
    for c in shown:
        name = c.name.replace("|", "\\|")
        text = f"| `{name}` | {c.tasks_done:,} | {c.tasks_total:,} | {c.percent:.1f} |"
        text += f" {'⚠' if c.flagged else ''} |"
        out.append(text)
    if hidden:
        out += ["", f"_{hidden}_"]
    return "\n".join(out)


FORMATTERS = {"table": format_table, "markdown": format_markdown}
#: What ``shardwise coverage --format`` takes.
FORMATS = ("table", "json", "markdown")


def report_dict(found: Report) -> dict[str, Any]:
    """``coverage --format json``: the coverage and the in-flight shards."""
    campaign = found.campaign.to_dict() if found.campaign is not None else None
    return {**to_dict(found.coverage), "in_flight": found.in_flight.to_dict(), "campaign": campaign}


def report_text(found: Report, fmt: str) -> str:
    """``coverage`` as a table or Markdown, then the in-flight block (when any)."""
    text, lines = FORMATTERS[fmt](found.coverage), found.in_flight.lines()
    if found.campaign is not None:
        lines = [*found.campaign.lines(), *lines]
    if not lines:
        return text
    block = "\n".join(lines)
    return text + (f"\n\n```\n{block}\n```" if fmt == "markdown" else f"\n\n{block}")


def _adaptation_dict(cov: Coverage) -> dict[str, Any] | None:
    """The walltime adaptation in force and its last change (all: ``cluster status``)."""
    record = cov.adapted
    if record is None:
        return None
    last = asdict(record.events[-1]) if record.events else None
    fit = asdict(record.fit) if record.fit is not None else None
    return {"fit": fit, "changes": len(record.events), "last": last}


def _missing_outputs_line(cov: Coverage) -> str:
    """Labelled files missing an output, and the fix ``--repair`` really makes: a derived
    output (Dolma attributes) is written again from the sidecar, relabelling nothing; any
    other is relabelled."""
    missing = cov.outputs_missing or {}
    what = ", ".join(f"{n:,} without their {kind}" for kind, n in missing.items())
    derived = {k.name for k in outputs.kinds() if k.derived}
    rebuilt, relabelled = missing.keys() & derived, missing.keys() - derived
    fix = []
    if rebuilt:
        names = ", ".join(sorted(rebuilt))
        text = f"writes their {names} outputs again from the sidecars (relabelling nothing; "
        fix.append(text + f"`shardwise dolma export --run-dir {cov.run_dir}` does the same)")
    if relabelled:
        fix.append(f"relabels the files without their {', '.join(sorted(relabelled))}")
    text = f"outputs  labelled file(s) with missing outputs: {what}; "
    text += f"`shardwise verify --run-dir {cov.run_dir}` names them, `--repair` "
    return text + " and ".join(fix)


def _fate_lines(cov: Coverage) -> list[str]:
    """One line: what SLURM did to the run's jobs outside its plan, each handled."""
    t = cov.fates
    if not t.any:
        return []
    text = (
        f"slurm    {t.preemptions:,} preemption(s) ({t.preemptions_last_hour:,} in the last hour), "
    )
    text += f"{t.node_failures:,} node failure(s), {t.lost:,} job(s) lost from squeue, {t.held:,} "
    text += "held after a requeue: each requeued or retried, finished files kept (`shardwise "
    text += "cluster status`)"
    if t.on_hold:
        text += f"; {t.on_hold:,} job(s) put on hold by their owner or an admin (`scontrol "
        text += "hold`): the run waits for their release (`scontrol release <job id>`)"
    return [text]


def _adaptation_lines(cov: Coverage) -> list[str]:
    """One line: the workflow changed walltimes by itself, and its last change."""
    record = cov.adapted
    if record is None or not record.events:
        return []
    last = record.events[-1]
    text = f"walltime the workflow adapted its limits to SLURM's plan ({len(record.events)} "
    text += f"change(s); `shardwise cluster status` shows them); last at {last.at}: {last.text}"
    return [text]
