"""``shardwise verify``: an fsck for a run, from the outside, trusting no marker.

Every done shard and every marked file is checked against the plan and the *input*,
each output through its kind's parser and checker (``run/outputs``); one listing of each
root finds orphans. A *problem* contradicts a marker (exit 1); a *warning* is a state a
retry clears by itself.
"""

from __future__ import annotations

import functools
import math
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from shardwise.errors import ConfigError, InputError, RecordError, ShardwiseError
from shardwise.ops.coverage_format import fidelity_lines, quality_lines
from shardwise.run import (
    changes,
    context,
    drift,
    fidelity,
    journal,
    markers,
    outputs,
    plan,
    quarantine,
    retired,
    runjson,
)
from shardwise.run import state as run_state
from shardwise.run.context import JobContext
from shardwise.run.reader import FieldPaths, read_documents
from shardwise.run.sharding import shard_for_task, shard_range
from shardwise.store.atomic import is_temp_name
from shardwise.store.location import Location


@dataclass(frozen=True, order=True)
class Finding:
    """One problem or warning: where (a URL or path) and what is wrong."""

    where: str
    what: str

    def line(self, level: str) -> str:
        """The one-line form the CLI prints."""
        return f"{level}: {self.where}: {self.what}"


@dataclass(kw_only=True)
class VerifyReport:
    """What ``verify_run`` found; ``ok`` is the exit decision."""

    run_dir: str
    sample: float = 1.0
    shards_total: int = 0
    shards_done: int = 0
    files_planned: int = 0
    files_marked: int = 0
    files_checked: int = 0
    rows_checked: int = 0
    orphans: int = 0
    files_quarantined: int = 0
    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    quarantined: list[Finding] = field(default_factory=list)
    data_quality: dict[str, int] = field(default_factory=dict)  # over the checked files
    fidelity: list[fidelity.Fidelity] = field(default_factory=list)  # over the checked files
    #: What ``--repair`` resets: files and shards whose marker vouches for something broken.
    broken_files: set[str] = field(default_factory=set)
    broken_shards: set[int] = field(default_factory=set)
    repairable: int = 0  # problems that removing those markers (or rebuilding) resolves
    #: Labelled files whose derived outputs are broken: rewritten from the sidecar.
    rebuild: set[str] = field(default_factory=set)
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # file -> (planned, now)
    inputs_gone: list[str] = field(default_factory=list)  # labelled, input gone (--extend)
    input_drift: dict[str, Any] = field(default_factory=dict)  # added and gone files
    retired: int = 0  # outputs of files retired with --gone keep: no orphans
    copies: str = ""  # the two run.json copies disagree: how, and which to keep
    measured_on_replaced: bool = False  # ... and the run directory's, checked against, goes

    @property
    def ok(self) -> bool:
        """True when nothing contradicts the markers."""
        return not self.problems

    def problem(
        self, where: str, what: str, *, file: str | None = None, shard: int | None = None,
        rebuild: str | None = None,
    ) -> None:  # fmt: skip
        """Record a contradiction; ``file``/``shard``: the marker ``--repair`` removes (the
        next run redoes exactly that); ``rebuild``: the file whose derived outputs it rewrites."""
        self.problems.append(Finding(where, what))
        if file is not None:
            self.broken_files.add(file)
        if shard is not None:
            self.broken_shards.add(shard)
        if rebuild is not None:
            self.rebuild.add(rebuild)
        if file is not None or shard is not None or rebuild is not None:
            self.repairable += 1

    def warn(self, where: str, what: str) -> None:
        """Record a state that a retry clears by itself."""
        self.warnings.append(Finding(where, what))

    def summary(self) -> str:
        """The last line the CLI prints."""
        verdict = "OK" if self.ok else "FAILED"
        sampled = f" (sample {self.sample:g})" if self.sample < 1 else ""
        text = f"verify {verdict}: {len(self.problems)} problem(s), {len(self.warnings)} "
        text += f"warning(s) in {self.run_dir}; shards done {self.shards_done}/"
        text += f"{self.shards_total}, files marked {self.files_marked}/{self.files_planned}, "
        text += f"quarantined {self.files_quarantined}, contents checked {self.files_checked}"
        gone = f", {len(self.inputs_gone)} input(s) gone" if self.inputs_gone else ""
        return text + f"{sampled} ({self.rows_checked} rows{gone}), orphans {self.orphans}"

    def lines(self) -> list[str]:
        """Every finding as one line (problems first), the data totals, then the summary."""
        out = [f.line("problem") for f in self.problems]
        out += [f.line("warning") for f in self.warnings]
        out += [f.line("quarantined") for f in self.quarantined]
        over = f"data: over the {self.files_checked} checked file(s): "
        quality = quality_lines(self.data_quality, self.rows_checked)
        data = [*quality, *fidelity_lines(self.fidelity)]
        out += [line.replace("data     ", over, 1) for line in data]
        out.append(self.summary())
        return out

    def to_json(self) -> dict[str, Any]:
        """A machine-readable form (``--format json``; docs/schemas/verify.schema.json)."""
        return {
            **asdict(self), "format_version": 1, "broken_files": sorted(self.broken_files),
            "broken_shards": sorted(self.broken_shards), "rebuild": sorted(self.rebuild),
            "ok": self.ok,
        }  # fmt: skip


@dataclass(kw_only=True)
class _FileCheck:
    """The result of reading one marked file's marker, stats, sidecar and input."""

    rel: str
    problems: list[Finding] = field(default_factory=list)
    derived: list[Finding] = field(default_factory=list)  # problems of derived outputs
    gone: Finding | None = None  # its input is gone: no relabel can mend that
    rows: int = 0
    marker_rows: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    fidelity: list[dict[str, Any]] = field(default_factory=list)


def verify_run(
    run_dir: Path, *, sample: float = 1.0, seed: int | None = None, jobs: int = 4,
    complete: bool = False,
) -> VerifyReport:  # fmt: skip
    """Check a run's markers against its outputs and inputs (module docstring); a
    ShardwiseError only when it cannot be verified at all (no run.json, plan, listing)."""
    if not 0 < sample <= 1:
        raise ConfigError(f"--sample must be in (0, 1], got {sample}")
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    run_dir = Path(run_dir)
    ctx = JobContext.load(run_dir)
    meta, table, left_out = ctx.meta, plan.load(run_dir), quarantine.load(run_dir)
    planned = _planned(ctx, table)
    in_run = shard_range(meta.total_shards, meta.minimum_shard_index)
    report = VerifyReport(run_dir=str(run_dir), sample=sample, shards_total=len(in_run),
                          files_planned=len(planned), files_quarantined=len(left_out))  # fmt: skip
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
        report, run_dir, meta=meta, done=done, files_by_shard=files_by_shard, found=found,
        output=ctx.output, left_out=set(left_out),
    )  # fmt: skip
    report.shards_done = len(done & set(in_run))
    if complete:
        _check_complete(report, run_dir, set(in_run) - done, files_by_shard=files_by_shard,
                        found=found, left_out=left_out)  # fmt: skip

    marked = sorted(rel for rel, kinds in found.items() if outputs.MARKER.name in kinds)
    report.files_marked = len(marked)
    listed = _check_identities(report, ctx, table, set(marked))
    _check_drift(report, ctx, set(planned), listed, set(left_out))
    for rel, kinds in sorted(found.items()):
        _check_presence(report, ctx, rel, kinds, planned[rel][1] in done)
        if rel in left_out and outputs.MARKER.name in kinds:
            report.warn(ctx.output.url(outputs.MARKER.rel(rel)), _LABELLED_QUARANTINED)

    names = [name for name, _model, _input in meta.classifiers]

    def check(rel: str) -> _FileCheck:
        return _check_file(ctx, rel, planned[rel], names, found[rel])

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        checks = list(pool.map(check, _choose(marked, sample, seed)))
    marker_rows = _add_checks(report, checks)
    _check_shard_docs(report, run_dir, job_shards, files_by_shard, marker_rows)
    return report


_INPUT_GONE = (
    "input file gone, its labels kept: --repair cannot relabel it; `shardwise plan --extend "
    "--gone keep|remove` takes it out of the run (its outputs kept or deleted)"
)
_LABELLED_QUARANTINED = "quarantined, yet labelled (`shardwise quarantine --release` if it is fine)"


def _check_complete(
    report: VerifyReport, run_dir: Path, open_shards: set[int], *,
    files_by_shard: dict[int, list[str]], found: dict[str, dict[str, int]],
    left_out: Mapping[str, Any],
) -> None:  # fmt: skip
    """``--complete``: every shard not done is a problem, with its files left."""
    for shard in sorted(open_shards):
        files = files_by_shard.get(shard, ())
        left = sum(outputs.MARKER.name not in found[rel] and rel not in left_out for rel in files)
        where = str(markers.shard_marker_path(run_dir, shard))
        what = f"shard {shard} is not done ({left} of {len(files)} file(s) without a marker)"
        report.problem(where, what)


def _add_checks(report: VerifyReport, checks: list[_FileCheck]) -> dict[str, int | None]:
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
        for key, value in check.counts.items():
            report.data_quality[key] = report.data_quality.get(key, 0) + value
    return marker_rows


def _planned(ctx: JobContext, table: pa.Table) -> dict[str, tuple[str, int]]:
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
    rule = functools.partial(shard_for_task, total_shards=meta.total_shards,
                             minimum_shard_index=meta.minimum_shard_index)  # fmt: skip
    moved = {task for task, shard in planned.values() if shard != rule(task)}
    if moved:
        report.problem(where, f"{len(moved)} task(s) in the wrong shard (e.g. {min(moved)!r})")


def _check_drift(
    report: VerifyReport, ctx: JobContext, planned: set[str], listed: set[str], left_out: set[str]
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
    report: VerifyReport, ctx: JobContext, table: pa.Table, marked: set[str]
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
    report: VerifyReport, ctx: JobContext, listing: dict[str, int],
    planned: dict[str, tuple[str, int]], retired_files: set[str],
) -> dict[str, dict[str, int]]:  # fmt: skip
    """Planned file -> {kind: size} of its outputs; everything else is an orphan (but the
    outputs of retired files, kept on purpose)."""
    found: dict[str, dict[str, int]] = {rel: {} for rel in planned}
    corpus = ctx.output.inner_prefix(ctx.source)
    for rel, size in sorted(listing.items()):
        if rel == runjson.RUN_JSON:
            continue
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
    report: VerifyReport, ctx: JobContext, found: dict[str, dict[str, int]], retired_files: set[str]
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
    report: VerifyReport, run_dir: Path, *, meta: runjson.RunMeta, done: set[int],
    files_by_shard: dict[int, list[str]], found: dict[str, dict[str, int]], output: Location,
    left_out: set[str],
) -> dict[int, int]:  # fmt: skip
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
        if marker.source == "job" and marker.docs is not None:
            job_docs[shard] = marker.docs
    return job_docs


def _check_shard_docs(
    report: VerifyReport, run_dir: Path, job_docs: dict[int, int],
    files_by_shard: dict[int, list[str]], marker_rows: dict[str, int | None],
) -> None:  # fmt: skip
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


def _check_presence(
    report: VerifyReport, ctx: JobContext, rel: str, kinds: dict[str, int], shard_done: bool
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


def _choose(marked: list[str], sample: float, seed: int | None) -> list[str]:
    """Every marked file, or a random ``sample`` fraction of them (at least one)."""
    if sample >= 1 or not marked:
        return marked
    k = max(1, math.ceil(sample * len(marked)))
    return sorted(random.Random(seed).sample(marked, k))


def _ids_only(fields: FieldPaths) -> FieldPaths:
    """Reader fields that fetch only the id (text and url point at it too): Parquet then
    skips the text column, by far the largest; rows and ids are the job's read."""
    return FieldPaths(id=fields.id, text=fields.id, url=None)


def _check_file(
    ctx: JobContext, rel: str, plan_row: tuple[str, int], classifiers: Iterable[str],
    kinds: dict[str, int],
) -> _FileCheck:  # fmt: skip
    """Read one marked file's outputs and its input's ids, and check each output against
    them (``outputs``: each kind's parser and checker), the marker first."""
    check = _FileCheck(rel=rel)
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
    for kind in reversed(outputs.kinds()):
        if kind.name not in kinds or kind.root not in roots:
            continue
        record = _read_output(roots[kind.root], kind, rel, check)
        if record is None:
            continue
        where = roots[kind.root].url(kind.rel(rel))
        found = [Finding(where, what) for what in kind.check(record, want)]
        (check.derived if kind.derived else check.problems).extend(found)
        if kind is outputs.MARKER:
            check.marker_rows = record.rows
        elif kind is outputs.STATS:
            check.counts = record.quality()
            check.fidelity = list(record.fidelity or ())
        elif kind is outputs.SIDECAR and docs is not None:
            check.rows = len(docs)
    return check


def _read_output(output: Location, kind: outputs.OutputKind, rel: str, check: _FileCheck) -> Any:
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


def repair(run_dir: Path, report: VerifyReport) -> list[str]:
    """Remove exactly the markers that vouch for broken work (so the next run relabels
    only those files), and rewrite broken derived outputs from their sidecars; a line per
    thing done. Shard markers go first, then the journal and snapshot, then file markers:
    an interruption anywhere never leaves a shard marked done over a file without one."""
    run_dir = Path(run_dir)
    ctx = JobContext.load(run_dir)
    by_shard = _broken_by_shard(run_dir, report)
    reset = markers.remove_shard_markers(run_dir, sorted(report.broken_shards | set(by_shard)))
    removed = [
        f"removed {markers.shard_marker_path(run_dir, s)} (shard {s} runs again)" for s in reset
    ]
    for shard, files in sorted(by_shard.items()):  # before the markers: jobs on object
        journal.forget(run_dir, shard, files)  # stores trust these two instead of them
        markers.forget_in_snapshot(run_dir, files)
    for rel in sorted(report.broken_files):
        ctx.output.remove(outputs.MARKER.rel(rel))
        removed.append(f"removed {ctx.output.url(outputs.MARKER.rel(rel))} (relabel {rel})")
    for rel in sorted(report.rebuild - report.broken_files):  # relabelled ones get new ones
        removed += [f"rewrote {url} from the sidecar" for url in
                    outputs.rebuild(ctx.roots(), rel, ctx.settings.dolma_name)]  # fmt: skip
    _take_identities(run_dir, report.changed)  # relabelled as they are now
    return removed


def _broken_by_shard(run_dir: Path, report: VerifyReport) -> dict[int, set[str]]:
    """The broken files of each shard (by the plan)."""
    rows = plan.load(run_dir).to_pydict()
    shard_of = dict(zip(rows["file"], rows["shard"], strict=True))
    by_shard: dict[int, set[str]] = defaultdict(set)
    for rel in sorted(report.broken_files):
        if rel in shard_of:
            by_shard[shard_of[rel]].add(rel)
    return by_shard


def shards_to_reset(run_dir: Path, report: VerifyReport) -> list[int]:
    """The marked shards whose markers ``repair`` removes: broken ones, and those that
    hold a broken file."""
    wanted = report.broken_shards | set(_broken_by_shard(Path(run_dir), report))
    return sorted(wanted & markers.done_shards(Path(run_dir)))


def accept_changed(run_dir: Path, report: VerifyReport) -> list[str]:
    """Keep the labels of input files changed in place, on purpose: the plan takes their
    new identity, so no view reports them again. Returns one line per file."""
    _take_identities(Path(run_dir), report.changed)
    return [
        f"accepted {rel}: its labels stay (made from {a}, the file is now {b})"
        for rel, (a, b) in sorted(report.changed.items())
    ]


def _take_identities(run_dir: Path, changed: dict[str, tuple[str, str]]) -> None:
    """The plan records these files as they are now; changed.json forgets them."""
    if not changed:
        return
    table = plan.with_identities(plan.load(run_dir), {rel: b for rel, (_a, b) in changed.items()})
    summary = plan.load_summary(run_dir)
    if summary is not None:
        plan.save(run_dir, table, summary)
    changes.forget(run_dir, set(changed))


def restore_run_json(run_dir: Path) -> list[str]:
    """Make the two run.json copies one again (``--repair``); the output root comes from
    ``settings.json``, so a damaged run-directory copy still finds the other."""
    output = context.recorded_output(Path(run_dir))
    if output is None:
        return []  # never planned by this version: nothing says where the other copy is
    return runjson.restore(Location(str(run_dir)), output, lambda: run_state.vouching(run_dir))


def repair_command(run_dir: Path) -> str:
    """The command that repairs a run (printed when verify finds broken markers)."""
    return f"shardwise verify --run-dir {run_dir} --repair"
