"""``shardwise verify``, file by file: each marked file's outputs read through their kind's
parser and checked against its input (rows, ids in order, classifier columns), and each
listed file's outputs present and non-empty; the results added to the report."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shardwise.errors import InputError, RecordError, ShardwiseError
from shardwise.ops.verify.render import Finding, VerifyReport
from shardwise.run import (
    fidelity,
    outputs,
)
from shardwise.run.fields import FieldPaths
from shardwise.run.opened import OpenRun
from shardwise.run.reader import read_documents
from shardwise.store.location import Location


@dataclass(kw_only=True)
class FileCheck:
    """The result of reading one marked file's marker, stats, sidecar and input."""

    rel: str
    problems: list[Finding] = field(default_factory=list)
    derived: list[Finding] = field(default_factory=list)  # problems of derived outputs
    gone: Finding | None = None  # its input is gone: no relabel can mend that
    rows: int = 0
    marker_rows: int | None = None
    site: str | None = None  # the campaign site its marker names
    counts: dict[str, int] = field(default_factory=dict)
    fidelity: list[fidelity.FileFidelity] = field(default_factory=list)


_INPUT_GONE = (
    "input file gone, its labels kept: --repair cannot relabel it; `shardwise plan --extend "
    "--gone keep|remove` takes it out of the run (its outputs kept or deleted)"
)


def add_checks(report: VerifyReport, checks: list[FileCheck]) -> dict[str, int | None]:
    """Fold the files' checks into the report; each file's marker rows (for its shard)."""
    marker_rows: dict[str, int | None] = {}
    report.fidelity = fidelity.totals(check.fidelity for check in checks)
    for check in checks:
        if check.gone is not None:
            report.problems.append(check.gone)
            report.inputs_gone.append(check.rel)
        report.problems.extend(check.problems + check.derived)
        if check.problems:
            report.broken_files.add(check.rel)
        if check.derived:
            report.rebuild.add(check.rel)
        report.repairable += len(check.problems) + len(check.derived)
        report.files_checked += int(check.gone is None)  # a gone input cannot be read
        report.rows_checked += check.rows
        marker_rows[check.rel] = check.marker_rows
        if check.site is not None:
            report.labelled_by[check.site] = report.labelled_by.get(check.site, 0) + 1
        for key, value in check.counts.items():
            report.data_quality[key] = report.data_quality.get(key, 0) + value
    return marker_rows


def check_presence(
    report: VerifyReport, ctx: OpenRun, rel: str, kinds: dict[str, int], shard_done: bool
) -> None:
    """From the listings alone: a marker needs every output it vouches for; partial outputs."""
    roots = ctx.roots()
    if outputs.MARKER.name in kinds:
        for kind in outputs.wanted(rel, roots):
            if kind.name not in kinds:
                where = ctx.output.url(outputs.MARKER.rel(rel))
                what = f"marker without its {kind.name}{_IGNORED.get(kind.name, '')}"
                report.problem(where, what, **_repair_by(kind, rel))
            elif kind.nonempty and kinds[kind.name] == 0:
                where = roots[kind.root].url(kind.rel(rel))
                report.problem(where, f"empty {kind.name} (0 bytes)", **_repair_by(kind, rel))
        return
    for kind in outputs.vouched():
        if kind.name not in kinds or kind.derived:
            continue  # a derived output of an unlabelled file is rewritten with it
        report.orphans += 1
        where = roots[kind.root].url(kind.rel(rel))
        if shard_done:
            report.problem(where, f"orphan {kind.name}: no marker, yet its shard is marked done")
        else:
            report.warn(where, f"{kind.name} without a marker (unfinished; rewritten on retry)")


def _repair_by(kind: outputs.OutputKind, rel: str) -> dict[str, str]:
    """How ``--repair`` mends a broken output: rebuilt from the sidecar, or relabelled."""
    return {"rebuild": rel} if kind.derived else {"file": rel}


#: What a missing output costs downstream, where a tool would not say so itself.
_IGNORED = {
    "dolma": " attributes (dolma mix ignores that silently: an include filter drops all "
    "its documents, an exclude keeps them all)"
}


def choose(marked: list[str], sample: float, seed: int | None) -> list[str]:
    """Every marked file, or a random ``sample`` fraction of them (at least one)."""
    if sample >= 1 or not marked:
        return marked
    k = max(1, math.ceil(sample * len(marked)))
    return sorted(random.Random(seed).sample(marked, k))


def _ids_only(fields: FieldPaths) -> FieldPaths:
    """Reader fields that fetch only the id (text and url point at it too): Parquet then
    skips the text column, by far the largest; rows and ids are the job's read."""
    return FieldPaths(id=fields.id, text=fields.id, url=None)


def check_file(
    ctx: OpenRun,
    rel: str,
    plan_row: tuple[str, int],
    classifiers: Iterable[str],
    kinds: dict[str, int],
) -> FileCheck:
    """Read one marked file's outputs and its input's ids, and check each output against
    them (``outputs``: each kind's parser and checker), the marker first."""
    check = FileCheck(rel=rel)
    task_id, shard = plan_row
    try:
        docs = read_documents(ctx.source, rel, _ids_only(ctx.fields), ctx.fmt)
    except InputError as e:
        docs = None
        if not ctx.source.exists(rel):
            check.gone = Finding(ctx.source.url(rel), _INPUT_GONE)
            return check
        check.problems.append(Finding(ctx.source.url(rel), f"input unreadable: {e}"))
    ids = docs.ids if docs else None
    want = outputs.Expected(
        rel=rel,
        task_id=task_id,
        shard=shard,
        ids=ids,
        classifiers=tuple(classifiers),
        labelling=ctx.meta.labelling,
        id_json=docs.id_json if docs else None,
        models=ctx.meta.models,
    )
    roots = ctx.roots()
    holders: dict[str, tuple[str, int] | None] = {}
    for kind in reversed(outputs.kinds()):
        if kind.name not in kinds or kind.root not in roots:
            continue
        record = _read_output(roots[kind.root], kind, rel, check)
        if record is None:
            continue
        where = roots[kind.root].url(kind.rel(rel))
        found = [Finding(where, what) for what in kind.check(record, want)]
        (check.derived if kind.derived else check.problems).extend(found)
        holders[kind.name] = outputs.holder_of(kind, record)
        if kind is outputs.MARKER:
            check.marker_rows, check.site = record.rows, record.site
        elif kind is outputs.STATS:
            check.counts = record.quality()
            check.fidelity = list(record.fidelity or ())
        elif kind is outputs.SIDECAR and docs is not None:
            check.rows = len(docs)
    mixed = _mixed_holders(holders)
    if mixed:
        check.problems.append(Finding(ctx.output.url(outputs.MARKER.rel(rel)), mixed))
    return check


def _mixed_holders(holders: dict[str, tuple[str, int] | None]) -> str:
    """Why a file's outputs are not one campaign holder's ("" when they are, or say
    nothing): a holder that stalled past its lease wrote over another site's."""
    said = {name: h for name, h in holders.items() if h is not None}
    if len(set(said.values())) <= 1:
        return ""
    who = "; ".join(f"{name}: site {h[0]!r}, epoch {h[1]}" for name, h in said.items())
    return (
        f"outputs written by different holders ({who}): a job that stalled past its lease "
        "wrote over another site's; `--repair` removes them and the file is labelled again"
    )


def _read_output(output: Location, kind: outputs.OutputKind, rel: str, check: FileCheck) -> Any:
    """One output parsed into its record; None (and the problem recorded) when it cannot be."""
    where = output.url(kind.rel(rel))
    found = check.derived if kind.derived else check.problems
    try:
        return kind.parse(output.read_bytes(kind.rel(rel)), where)
    except FileNotFoundError:
        found.append(Finding(where, "vanished while verifying"))
    except RecordError as e:
        found.append(Finding(where, f"unreadable {kind.name}: {e.reason}"))
    except (ShardwiseError, OSError) as e:
        found.append(Finding(where, f"unreadable {kind.name}: {e}"))
    return None
