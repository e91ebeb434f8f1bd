"""One logical shard, file by file: the body of the classify rule.

Each file without a marker is read (a reader thread one file ahead), labelled, and its
outputs written with the marker last. A file that cannot be read is recorded and the
others go on; the shard then fails (Snakemake retries it). The shard marker is written
only when every file has its marker. SIGTERM (SLURM's warning before a walltime or
preemption kill) raises ``Interrupted``: nothing partial is marked done.
"""

import contextlib
import dataclasses
import functools
import logging
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pyarrow as pa

from shardwise.classify import gate, jobmodels, stopcause
from shardwise.classify.prefetch import FileTask, Loaded, prefetch
from shardwise.classify.progress import progress_bar
from shardwise.classify.tokencount import TokenCounter
from shardwise.classify.tokenization import labelling
from shardwise.config import Pair, resolve_pairs
from shardwise.errors import InputError, ModelError, ShardFailedError, ShardwiseError
from shardwise.run import (
    budgets,
    claims,
    failures,
    journal,
    labelcounts,
    markers,
    outputs,
    plan,
    quarantine,
    sidecar,
    sitelease,
    summaries,
    throughput,
)
from shardwise.run.failures import FailedFile
from shardwise.run.filestats import FileStats
from shardwise.run.labelling import Labelling
from shardwise.run.opened import OpenRun, open_run
from shardwise.run.sitelease import SiteLease
from shardwise.slurm import jobclock

log = logging.getLogger("shardwise.classify.shard_job")


class Interrupted(BaseException):
    """The job received SIGTERM/SIGINT and stopped without marking partial work (a
    BaseException, so no ``except Exception`` on the way turns a stop into a failure)."""


@dataclass(kw_only=True)
class ShardReport:
    """What a shard job did (returned for tests and logs)."""

    shard: int
    files: int
    skipped: int = 0
    labelled: int = 0
    docs: int = 0
    quarantined: int = 0
    failed: list[FailedFile] = field(default_factory=list)
    #: The half-precision dtype the engine runs on a CPU (device ``auto``, no GPU), else None.
    half_on_cpu: str | None = None
    #: The exception behind each entry of ``failed`` (for the failure's cause).
    errors: list[BaseException] = field(default_factory=list, repr=False)


def quarantine_hint(run_dir: Path) -> str:
    """How to leave out a file that cannot be fixed (said with every file failure)."""
    text = "A file that cannot be fixed can be left out: "
    return text + f"`shardwise quarantine --run-dir {run_dir} FILE --reason TEXT`."


def shard_files(ctx: OpenRun, shard: int) -> list[FileTask]:
    """The shard's files from the cached plan, in file order."""
    rows = plan.files_of_shard(ctx.plan, shard).to_pylist()
    return [FileTask(r["file"], r["size"], r["task_id"], r["identity"]) for r in rows]


def files_done(
    ctx: OpenRun, shard: int, files: list[FileTask], *, fresh: bool = False
) -> dict[str, int | None]:
    """Files of the shard that already have a marker, with their row counts if known: on
    object storage no request per file, but the planner's snapshot of the markers and this
    shard's journal (rows of files finished elsewhere unknown); else, or ``fresh`` (in a
    campaign another site may have labelled files since this site planned), each marker
    is read."""
    remote = ctx.output.remote and not fresh
    listed = markers.read_snapshot(ctx.run_dir) if remote else None
    if listed is not None:
        known: dict[str, int | None] = {f.rel: None for f in files if f.rel in listed}
        known.update(journal.rows_done(ctx.run_dir, shard))
        return {f.rel: known[f.rel] for f in files if f.rel in known}
    done: dict[str, int | None] = {}
    for f in files:
        try:
            done[f.rel] = outputs.read_marker(ctx.output, f.rel).rows
        except (FileNotFoundError, ValueError):
            continue  # absent, or unreadable: it vouches for nothing, redo the file
    return done


def run_shard(
    run_dir: Path,
    shard: int,
    *,
    engine_factory: Callable[[OpenRun], Any] | None = None,
    progress: bool = True,
) -> ShardReport:
    """Label every unfinished file of ``shard``, then mark the shard done."""
    ctx = open_run(run_dir)
    files = shard_files(ctx, shard)
    ctx.source.remember_sizes({f.rel: f.size for f in files})  # no HEAD per file
    holder = claims.for_this_process(shard).holder()
    instance = sitelease.instance_id(ctx.run_dir) if ctx.settings.campaign.site else ""
    with _leased(ctx, shard, holder, instance) as lease:
        done = files_done(ctx, shard, files, fresh=lease is not None)
        left_out = ctx.quarantined
        report = ShardReport(shard=shard, files=len(files), skipped=len(done))
        todo = [f for f in files if f.rel not in done and f.rel not in left_out]
        if todo:
            factory = engine_factory or load_engine
            _label_todo(ctx, shard, todo, report, factory, lease, progress=progress)
    if report.failed:
        _fail(run_dir, report, len(todo))
    # the quarantine as it is now (a file quarantined while the job ran was left out: it
    # has no marker); a quarantined file never counts as labelled, in any view
    left_out = ctx.quarantined_now()
    report.quarantined = sum(f.rel in left_out for f in files)
    kept = {rel: rows for rel, rows in done.items() if rel not in left_out}
    report.docs += sum(rows or 0 for rows in kept.values())
    unknown_docs = any(rows is None for rows in kept.values())
    file_stats = summaries.write_for_shard(
        run_dir,
        shard,
        [(f.rel, f.task_id) for f in files if f.rel not in left_out],
        lambda rel: ctx.output.read_bytes(outputs.STATS.rel(rel)),
        lambda rel, stats: outputs.stats_problems(stats, rel, ctx.meta.labelling, ctx.meta.models),
    )
    marker = markers.ShardMarker(
        shard=shard,
        total_shards=ctx.meta.total_shards,
        minimum_shard_index=ctx.meta.minimum_shard_index,
        tasks=len({f.task_id for f in files}),
        files=len(files),
        docs=None if unknown_docs else report.docs,
        quarantined=report.quarantined,
        file_stats=file_stats,
    )
    markers.write_shard_marker(run_dir, marker)
    sitelease.record_done(ctx.output, ctx.settings.campaign, shard, report.labelled, holder)
    sitelease.publish_shard(ctx.output, ctx.settings.campaign, run_dir, shard)
    return report


def half_on_cpu(engine: Any) -> str | None:
    """The engine's dtype when it is half precision on a CPU (what the console says)."""
    dtype = str(getattr(engine, "dtype_name", "") or "")
    on_cpu = str(getattr(engine, "device", "")).startswith("cpu")
    return dtype if on_cpu and dtype not in ("", "float32") else None


def _label_todo(
    ctx: OpenRun,
    shard: int,
    todo: list[FileTask],
    report: ShardReport,
    engine_factory: Callable[[OpenRun], Any],
    lease: SiteLease | None,
    *,
    progress: bool,
) -> None:
    """Label ``todo`` in order, one file ahead on the reader thread, into ``report``. A file
    that cannot be read is recorded and the rest go on; anything else stops the shard
    (a lost campaign lease too), recorded with the file it stopped at."""
    run_dir = ctx.run_dir
    bar = progress_bar(len(todo), shard, enabled=progress)
    current = ""
    try:
        gate.pause(shard, 0)  # tests only: see classify/gate.py
        gate.moment("start")
        sources = jobmodels.model_sources(ctx)  # each model's directory, resolved once
        models = jobmodels.model_identities(ctx, sources)
        jobmodels.check_models(
            ctx, models, sources
        )  # before anything is labelled: one model per output
        gate.moment("checked")
        engine = engine_factory(jobmodels.loading_from(ctx, sources))
        gate.moment("loaded")
        jobmodels.check_loaded(ctx, models, sources)  # the bytes loaded are the bytes checked
        startup = _startup_s()
        report.half_on_cpu = half_on_cpu(engine)
        counter = load_counter(ctx)
        for item in prefetch(ctx, todo, engine.prepare, counter):
            current = item.task.rel
            if current in ctx.quarantined_now():  # quarantined since the job started
                log.warning("%s: quarantined while this job ran: left out", current)
            elif item.error is not None:
                report.failed.append(FailedFile(item.task.rel, item.error))
                report.errors.append(item.exc or InputError(item.error))
                if item.fatal:
                    break
            elif (written := _label_file(ctx, engine, item, shard, models, lease, startup)) is None:
                log.warning("%s: quarantined while it was labelled: left out", current)
            else:
                rows, stats = written
                journal.append(run_dir, shard, journal.Line.of(item.task.rel, rows, stats))
                report.docs += rows
                report.labelled += 1
                startup = None  # the job's start-up, on its first file only
                gate.pause(shard, report.labelled)
                gate.moment("labelled")
            bar.update(1)
    except Interrupted:
        stop = stopcause.why_stopped(run_dir, report.labelled)  # walltime, cancel, preemption
        failures.record_failure(run_dir, shard, report.failed, cause=stop.cause, limit=stop.limit)
        raise
    except Exception as e:
        # model, storage (e.g. disk full), the device (a CUDA error, named with GPU and host
        # by the engine) or a bug: the whole shard stops, and the record names the file
        error = str(e) if isinstance(e, ShardwiseError) else f"{type(e).__name__}: {e}"
        failed = [*report.failed, FailedFile(current or "(before the first file)", error)]
        cause = failures.cause_of(e, ctx.source.url(current) if current else "")
        failures.record_failure(run_dir, shard, failed, cause=cause)
        raise
    finally:
        bar.close()


@contextlib.contextmanager
def _leased(ctx: OpenRun, shard: int, holder: str, instance: str) -> Iterator[SiteLease | None]:
    """The shard's campaign lease (``sitelease.held``; None outside a campaign); a wait for
    another holder that had to end before this job's walltime is recorded as the shard's
    failure (cause ``claimed``: the console names it) before it propagates."""
    wait_until = functools.partial(_lease_wait_until, ctx)
    with contextlib.ExitStack() as stack:
        try:
            campaign = ctx.settings.campaign
            held = sitelease.held(
                ctx.output, campaign, shard, holder, instance, wait_until=wait_until
            )
            lease = stack.enter_context(held)
        except sitelease.LeaseWaitEndedError as e:
            before = [FailedFile("(before the first file)", str(e))]
            failures.record_failure(ctx.run_dir, shard, before, cause=failures.cause_of(e))
            raise
        yield lease


#: Seconds a file is taken to need before any of this run's shards has one measured.
FILE_UNMEASURED_S = 600.0
#: Journals read for a file's measured time (up to this many shards'), when a job must wait.
NEED_JOURNALS = 20


def _lease_wait_until(ctx: OpenRun) -> float | None:
    """The ``time.monotonic()`` by which a wait for another site's lease ends: this job's
    stop (``stopcause.seconds_left``) less a job's start-up (the models load after the
    wait) and one file's time, as measured (``FileNeed``, from up to
    :data:`NEED_JOURNALS` shards' journals of this run); None outside SLURM."""
    left = stopcause.seconds_left()
    if left is None:
        return None
    shards = journal.shards(ctx.run_dir)[-NEED_JOURNALS:]
    lines = [ln for s in shards for ln in journal.entries(ctx.run_dir, s).values()]
    need = throughput.file_need([ln.stats for ln in lines if ln.stats])
    file_s = FILE_UNMEASURED_S if need is None else need.seconds + (need.startup_s or 0.0)
    return time.monotonic() + left - file_s


def _startup_s() -> float | None:
    """Seconds since this job began (``slurm/jobclock.py``), None where unknown."""
    began = jobclock.started_at()
    return None if began is None else round(max(0.0, time.time() - began), 3)


def _fail(run_dir: Path, report: ShardReport, todo: int) -> None:
    """Record the shard's failed files and raise ShardFailedError listing them."""
    hint = quarantine_hint(run_dir)
    cause = failures.cause_of_files(report.errors, todo, report.labelled, hint)
    failures.record_failure(run_dir, report.shard, report.failed, cause=cause)
    if cause.kind == "storage":  # no file is at fault: no file named as failing
        msg = f"shard {report.shard}: {cause.reason}; every finished file stays done"
        raise ShardFailedError(msg)
    names = ", ".join(f.file for f in report.failed)
    details = "\n".join(f"  {f.error}" for f in report.failed)
    fix = "" if cause.shared else f"\n{hint}"
    tried = report.labelled + len(report.failed)
    msg = f"shard {report.shard}: {len(report.failed)} of {tried} file(s) tried failed ({names}); "
    msg += f"every other finished file stays done; the shard will be retried:\n{details}{fix}"
    raise ShardFailedError(msg)


def _label_file(
    ctx: OpenRun,
    engine: Any,
    item: Loaded,
    shard: int,
    models: dict[str, Any],
    lease: SiteLease | None,
    startup: float | None = None,
) -> tuple[int, FileStats] | None:
    """Run the engine on one read file and write its outputs (``outputs.write_all``: the
    marker last, under the quarantine's lock; in a campaign the lease renewed first and
    each write fenced by it, ``run/sitelease.py``: LeaseLostError once it is lost or may
    have run out).
    Returns the row count and the stats written; None when the file was quarantined
    meanwhile (no outputs are left)."""
    assert item.docs is not None
    t0 = time.perf_counter()
    labels = engine.run(item.prepared)
    infer_s = time.perf_counter() - t0
    rel, task = item.task.rel, item.task
    timings = {"read": item.read_s, "tokenize": item.tokenize_s, "infer": infer_s}
    if item.tokens is not None:
        timings["count_tokens"] = item.count_s
    sizes = labelcounts.text_bytes(item.docs.texts)
    counts = labelcounts.count_labels(labels.columns, sizes, *_counted(ctx), tokens=item.tokens)
    stats = FileStats.of_labelled(
        rel=rel,
        task_id=task.task_id,
        shard=shard,
        size=task.size,
        docs=len(item.docs),
        timings=timings,
        engine=labels.stats,
        device=str(getattr(engine, "device", "")),
        device_name=getattr(engine, "device_name", ""),
        dtype=getattr(engine, "dtype_name", ""),
        counts=item.docs.counts,
        models=models,
        identity=task.identity,
        labelling=_labelling(ctx),
        label_counts=counts,
    )
    if startup is not None:  # the job's first file: the floor of a job's walltime counts it
        stats = dataclasses.replace(stats, startup_s=startup)
    columns = dict(labels.columns)
    if item.tokens is not None:
        columns[sidecar.TOKENS] = pa.array(item.tokens, pa.int64())
    if item.docs.id_json is not None:  # kept so the Dolma attributes keep the ids' type
        columns[sidecar.ID_JSON] = pa.array(item.docs.id_json, pa.string())
    labelled = outputs.Labelled(
        rel=rel,
        task_id=task.task_id,
        shard=shard,
        identity=task.identity,
        ids=item.docs.ids,
        columns=columns,
        stats=stats,
        dolma_name=ctx.settings.dolma_name,
        holder=lease.holder if lease is not None else None,
    )
    if lease is not None:
        lease.renew()  # a lease taken over meanwhile is found before a byte is written
    written = outputs.write_all(
        ctx.roots(),
        labelled,
        lambda: quarantine.vouching(ctx.run_dir, rel),
        fence=lease.fence if lease is not None else None,
    )
    if written is None:
        return None
    if item.docs.counts:  # labelled, not fatal (the reader's policy): said in the job log too
        found = ", ".join(f"{k}={v}" for k, v in sorted(item.docs.counts.items()))
        warning = "%s: labelled despite input problems (%s); see counts in its stats"
        log.warning(warning, ctx.source.url(rel), found)
    return len(item.docs), written


def _labelling(ctx: OpenRun) -> Labelling:
    """What this job labels with besides the models (the same shape run.json pins)."""
    return labelling(
        ctx.fields.id,
        ctx.fields.text,
        ctx.settings.input.url_field,
        ctx.settings.inference.max_length,
        (kind for _name, _model, kind in ctx.meta.classifiers),
        count_tokenizer=_pinned_counter(ctx),
    )


def _pinned_counter(ctx: OpenRun) -> str | None:
    """The counting tokenizer's hash run.json pins (None: none counts)."""
    return ctx.meta.labelling.count_tokenizer if ctx.meta.labelling is not None else None


def load_counter(ctx: OpenRun) -> TokenCounter | None:
    """The training tokenizer that counts tokens (``domains.tokenizer``), if the run
    sets one; ModelError when it is not the one run.json pins (changed on disk)."""
    source = ctx.settings.domains.tokenizer
    if source is None:
        return None
    counter = TokenCounter.load(source)
    pinned = _pinned_counter(ctx)
    if counter.identity != pinned:
        msg = f"domains.tokenizer {source!r} is not the tokenizer run.json pins (content hash "
        msg += f"{counter.identity[:12]} != {str(pinned)[:12]}): it changed since the run was "
        msg += "planned; restore it, or use a new output.uri for another tokenizer"
        raise ModelError(msg)
    return counter


def _counted(ctx: OpenRun) -> tuple[list[str], list[Pair]]:
    """Classifiers and pairs whose label counts go into each file's stats."""
    names = [name for name, _, _ in ctx.meta.classifiers]
    return names, resolve_pairs(names, ctx.settings.domains.pairs)


def load_engine(ctx: OpenRun) -> Any:
    """The classification engine for this run's classifiers and inference settings."""
    # torch and transformers load here, in jobs only: `shardwise` commands stay fast
    from shardwise.classify.engine import ClassifierSpec, Engine  # noqa: PLC0415 - torch: jobs only

    specs = [ClassifierSpec(n, m, i) for n, m, i in ctx.meta.classifiers]
    settings = ctx.settings.inference
    return Engine.load(specs, settings, budget_dir=ctx.run_dir / budgets.DIRECTORY)


def install_signal_handlers() -> None:
    """Turn SIGTERM/SIGINT into ``Interrupted`` in the main thread (graceful stop)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        msg = f"received {name}: stopping; finished files stay done, the shard will be retried"
        raise Interrupted(msg)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
