"""What the Snakefile calls at parse time: plan or read the run, nothing else.

The top-level process lists the input once, validates or creates both run.json copies,
caches the plan, records the job settings and marks shards that need no job (empty ones,
and ones whose files are all marked done already). A cluster job re-parses the Snakefile
too: there only run.json is read (no listing, no printing).
"""

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from shardwise.classify.modelcheck import check_classifiers
from shardwise.config import InferenceSettings, Settings
from shardwise.planner import (
    campaign,
    fieldcheck,
    housekeeping,
    inflight,
    listing,
    modelpins,
    pinning,
    runlock,
    snakemakelock,
)
from shardwise.run import (
    changes,
    context,
    dolma,
    drift,
    markers,
    outputs,
    plan,
    quarantine,
    ranges,
    runjson,
)
from shardwise.run.adoption import Adoption, adoption_end_path, write_adoption
from shardwise.run.claims import Submitter
from shardwise.run.manifest import build_tasks
from shardwise.run.opened import open_run
from shardwise.run.sharding import check_shard_count, shard_range
from shardwise.store.location import Location

#: The classify jobs' groups on SLURM (``RunInfo.group``).
GROUP, GROUP_ADOPTED = "classify", "classify_adopted"


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """What the Snakefile needs to declare its targets."""

    run_dir: Path
    shards: tuple[int, ...]
    output_uri: str
    in_flight: tuple[int, ...] = ()  # held by live jobs of an earlier invocation
    adopted: tuple[int, ...] = ()  # those of them whose holders this invocation waits for
    #: Each adopted holder (``Holder.key``: a job id, ``pid<pid>``) and the shards it holds.
    holders: tuple[tuple[str, tuple[int, ...]], ...] = ()
    adoption_token: str = ""  # names the adopt checkpoint's outputs (one per invocation)
    main_pid: int = 0  # the top-level process (the adoption stops when it dies)
    messages: tuple[str, ...] = ()  # what planning tells the operator (the caller prints)
    in_flight_lines: tuple[str, ...] = ()  # the report's "in flight" block
    held_elsewhere: tuple[int, ...] = ()  # held by live jobs of another site (a campaign)
    site: str | None = None  # this site's name in a campaign (campaign.site)

    def targets(self) -> list[str]:
        """The shard markers, the run's Snakemake targets (in-flight shards this run cannot
        check are left out; an adopted one waits for its holder's ``adopt`` job)."""
        skip = set(self.in_flight) - set(self.adopted)
        return [
            str(markers.shard_marker_path(self.run_dir, s)) for s in self.shards if s not in skip
        ]

    def awaited(self, shard: int) -> list[str]:
        """The classify rule's input for ``shard``: its await job's output while another
        site's live job held it at planning (``planner/campaign.py``), else nothing."""
        if shard not in self.held_elsewhere:
            return []
        return [str(campaign.awaited_path(self.run_dir, shard))]

    def priority(self, shard: int) -> int:
        """The classify job's priority: 0 for one site; in a campaign each site's own
        order of the shards (``planner/campaign.py``), so that sites started together do
        not all begin with the same shard and wait for one another."""
        return campaign.order(self.site, shard, len(self.shards))

    def group(self, shard: int) -> str:
        """The classify job's group on SLURM: ``classify`` (K shards per job, the
        profile's ``group-components``), or ``classify_adopted`` for a shard an adopted
        job held: alone, since it waits for that job's end (the other shards never wait
        for an adopted job)."""
        return GROUP_ADOPTED if shard in self.adopted else GROUP

    def holder_end(self, shard: int) -> list[str]:
        """An adopted shard's wait: the ``adopt`` job of the holder that held it."""
        token = self.adoption_token or "none"
        key = next((k for k, shards in self.holders if shard in shards), None)
        return [] if key is None else [str(adoption_end_path(self.run_dir, token, key))]

    def adoption_end(self) -> str:
        """The ``adopt`` rule's output, ``{holder}`` its wildcard (a name that exists in no
        earlier invocation)."""
        token = self.adoption_token or "none"
        return str(adoption_end_path(self.run_dir, token, "{holder}"))

    def when_settled(self, *paths: str) -> list[str]:
        """``paths`` unless shards are left out (held by jobs this run cannot check: then
        the run is not whole yet); adopted shards are waited for, so they do not count."""
        return [] if set(self.in_flight) - set(self.adopted) else list(paths)


def prepare_run(
    config: dict[str, Any],
    *,
    main_process: bool,
    dryrun: bool = False,
    repin: bool = False,
    submitter: inflight.Submitter | None = None,
) -> RunInfo:
    """Plan (top-level process) or read (cluster job) the run described by ``config``.
    ``repin`` replaces a run.json that differs while nothing is labelled; ``submitter``
    leaves out shards live jobs of an earlier invocation hold. Nothing is printed."""
    settings = Settings.from_config(config)
    run_dir = settings.run_dir
    if not main_process:
        meta = runjson.read_run_dir(run_dir)
        shards = tuple(shard_range(meta.total_shards, meta.minimum_shard_index))
        return RunInfo(run_dir=run_dir, shards=shards, output_uri=meta.output_uri)
    said: list[str] = []
    run_dir.mkdir(parents=True, exist_ok=True)
    if not dryrun or repin:
        said += runlock.lock_run_dir(run_dir)
    else:
        said += runlock.live_run_note(run_dir)
    check_classifiers(settings.classifiers)  # before anything is pinned
    recorded = context.RunSettings.of(settings)
    source, output = context.open_roots(settings)
    quarantined = quarantine.load(run_dir)
    planned = _plan_table(settings, source, output, set(quarantined), fresh=repin)
    copies = (runjson.read_copy(Location(str(run_dir))), runjson.read_copy(output))
    sampled: tuple[str, ...] = ()
    if repin or all(c.meta is None and c.damage is None for c in copies):
        # a new run (or a re-pin): read a sample before anything is pinned. A pinned run's
        # fields cannot change (run.json pins them), so later runs skip the reads.
        check_shard_count(settings.total_shards, planned.task_count)
        sampled = _check_sample(settings, recorded, source, planned.table, set(quarantined))
    meta = pinning.run_meta(settings, planned.task_count, planned.fingerprint)
    models_now = modelpins.current_models(meta)  # each model hashed once per dry run
    if not repin:
        copies, renamed = modelpins.respell(  # a campaign's output copy is every site's
            copies, meta, models_now, shared=settings.campaign.site is not None
        )
        said += renamed
    meta = replace(meta, models=modelpins.initial(models_now, copies))
    pinning.pin(
        settings, meta, planned.table, planned.input_drift, copies, repin=repin, say=said.append
    )
    said += modelpins.check_and_pin(run_dir, output, models_now)
    if planned.input_drift:  # the new set is the pinned one (an extension half done)
        drift.record(run_dir, drift.InputDrift())
    if planned.fresh:
        assignment = (settings.total_shards, settings.minimum_shard_index)
        summary = plan.summarize(planned.table, *assignment, settings.input.files_per_task)
        plan.save(run_dir, planned.table, summary)
    context.write_settings(run_dir, recorded)
    if planned.changed is not None:
        changes.record(run_dir, planned.changed)
        said += changes.lines(planned.changed, run_dir)
    said += _stale_marker_lines(run_dir, planned.table, meta)
    said += [f"note: {line}" for line in settings.inert]
    said += half_on_cpu_notes(settings.inference, gpu_visible)
    said += _dolma_notes(settings, planned.table)
    if settings.campaign.site is not None:  # what other sites finished, marked done here
        said += campaign.bring_in(open_run(run_dir)).lines(settings.campaign.site)
    housekeeping.mark_shards_without_work(run_dir, planned.table, meta, output, set(quarantined))
    done = markers.done_shards(run_dir)  # one listing, for the campaign and the live jobs
    sites = campaign.plan(run_dir, settings, output, done, dryrun=dryrun)
    flight, adoption = _take_over(run_dir, submitter, done, dryrun=dryrun, say=said.append)
    return RunInfo(
        run_dir=run_dir,
        shards=tuple(shard_range(meta.total_shards, meta.minimum_shard_index)),
        output_uri=settings.output_uri,
        in_flight=tuple(sorted(flight.shards)),
        adopted=adoption.shards if adoption is not None else (),
        holders=tuple((h.key(), h.shards) for h in adoption.holders) if adoption else (),
        adoption_token=adoption.token if adoption is not None else "",
        main_pid=os.getpid(),
        messages=(*said, *sites.lines, *(f"note: {n}" for n in (*planned.notes, *sampled))),
        in_flight_lines=tuple(flight.lines()),
        held_elsewhere=sites.held,
        site=settings.campaign.site,
    )


def _stale_marker_lines(run_dir: Path, table: pa.Table, meta: Any) -> list[str]:
    """Remove the shard markers the plan disagrees with (another assignment's); the note."""
    stale = housekeeping.remove_stale_markers(run_dir, table, meta)
    if not stale:
        return []
    text = f"note: removed {len(stale):,} shard marker(s) that do not match the plan "
    return [text + f"(shards {ranges.compress(stale)}; left by another assignment): they run again"]


def _take_over(
    run_dir: Path,
    submitter: Submitter | None,
    done: set[int],
    *,
    dryrun: bool,
    say: Callable[[str], None],
) -> tuple[inflight.InFlight, Adoption | None]:
    """What an earlier invocation left: the shards its live jobs hold (adopted when they
    can be checked), Snakemake's lock if its main process died, its "incomplete" flags."""
    flight = inflight.find(run_dir, submitter, done=done)
    if submitter is None:
        return flight, None
    adoption = inflight.adoption(run_dir, flight, f"{os.getpid()}-{secrets.token_hex(4)}")
    if not dryrun:  # a dry run holds no lock: it may sit beside a live run
        for line in snakemakelock.clear_stale(run_dir, submitter, Submitter.recorded(run_dir)):
            say(line)
        write_adoption(run_dir, adoption)
    submitter.record(run_dir)
    inflight.clear_stale_incomplete(run_dir, submitter.workdir)
    return flight, adoption


#: The dtypes that are half precision (as ``inference.dtype`` may spell them).
HALF_DTYPES = frozenset({"float16", "fp16", "bfloat16", "bf16"})


def half_on_cpu_notes(inference: InferenceSettings, visible: Callable[[], bool]) -> list[str]:
    """A half-precision dtype with device ``auto`` where ``visible`` says no GPU is: jobs
    that run here would label on the CPU (``device: cpu`` with float16 is refused)."""
    dtype = inference.dtype.strip().lower()
    device = inference.device.strip().lower()
    if device != "auto" or dtype not in HALF_DTYPES or visible():
        return []
    text = f"note: inference.dtype {dtype} with inference.device auto, and no GPU is visible "
    text += f"here: jobs that run here label on the CPU in {dtype}, slower than float32, and "
    text += "the re-check runs their documents again in float32 (jobs on GPU nodes are not "
    return [text + "affected); inference.dtype: auto picks float32 on a CPU, half on a GPU"]


def gpu_visible() -> bool:
    """Whether the device choice (``auto``) would find a GPU here; torch is imported only
    for a half-precision dtype with device auto (it costs seconds at parse time)."""
    import torch  # noqa: PLC0415

    return bool(torch.cuda.is_available())


def _dolma_notes(settings: Settings, table: pa.Table) -> list[str]:
    """What ``output.dolma`` will not cover: Parquet sources (dolma reads no Parquet)."""
    if settings.dolma is None:
        return []
    parquet = sum(not dolma.applies(rel) for rel in table["file"].to_pylist())
    if not parquet:
        return []
    text = f"note: {parquet:,} Parquet file(s) get no Dolma attributes (output.dolma): dolma "
    text += "mix reads JSON Lines documents only; their labels stay in the sidecars"
    return [text]


def _check_sample(
    settings: Settings,
    recorded: context.RunSettings,
    source: Location,
    table: pa.Table,
    quarantined: set[str],
) -> tuple[str, ...]:
    """Read a few files per format (see fieldcheck.py); ConfigError for a field none has."""
    inp = settings.input
    if not inp.sample_files:
        return ()
    listed = zip(table["file"].to_pylist(), table["size"].to_pylist(), strict=True)
    files = [(rel, size) for rel, size in listed if rel not in quarantined]
    kinds = tuple((c["name"], c["model"], c["input"]) for c in settings.classifiers)
    fields = context.fields_for(recorded, kinds)
    return fieldcheck.check_sample(source, files, fields, inp.format, inp.sample_files).notes


@dataclass(frozen=True, kw_only=True)
class _Planned:
    """The plan of this run and what the planner has to say about the listing."""

    table: pa.Table
    task_count: int
    fingerprint: str
    fresh: bool  # built now (save it once run.json agrees), not the cached one
    notes: list[str]
    #: Labelled files changed in place (file -> (planned, now)); None: not listed.
    changed: dict[str, tuple[str, str]] | None = None
    input_drift: drift.InputDrift | None = None  # files added or gone since planned


def _plan_table(
    settings: Settings,
    source: Location,
    output: Location,
    quarantined: set[str],
    *,
    fresh: bool = False,
) -> _Planned:
    """The cached plan when listing is off or the listed task set matches it (quarantined
    files may be gone), else a new one (not yet saved: run.json is checked first)."""
    run_dir = settings.run_dir
    cached = None if fresh else plan.load_summary(run_dir)
    notes: list[str] = []
    if cached is not None and _built_for_another(cached, settings):
        text = f"the cached plan was built for total_shards {cached.shards_total} (minimum "
        text += f"{cached.minimum_shard_index}, files_per_task {cached.files_per_task}), not these "
        notes.append(text + "settings (an interrupted re-pin?): it is built again")
        cached = None
    if cached is not None and not settings.input.relist:
        return _Planned(
            table=plan.load(run_dir),
            task_count=cached.tasks,
            fingerprint=cached.fingerprint,
            fresh=False,
            notes=notes,
        )
    listed = listing.list_input(settings, source, output)
    notes += listed.notes
    versions = listed.versions
    now = {rel: plan.identity(size, versions[rel]) for rel, size in listed.files}
    if cached is not None:
        old = plan.load(run_dir)
        labelled, unlabelled = _changed_in_place(old, now, output)
        kept = {rel: planned for rel, (planned, _now) in labelled.items()}  # still flagged
        found = _drift(old, listed, quarantined)
        drift.record(run_dir, found)
        if not found:  # the planned files (a quarantined one may be gone): the cached plan
            if len(old) > len(listed.files):
                text = f"{len(old) - len(listed.files)} quarantined file(s) are no longer in the "
                text += "input; the pinned plan is kept (`shardwise quarantine --list`)"
                notes.append(text)
            table = plan.with_identities(old, {**_unknown(old, now), **unlabelled})
            # the task set from the table itself: plan.json may lag it (an extension
            # interrupted between the two writes), and is then written again
            tasks_now = plan.task_ids(old)
            fingerprint = runjson.fingerprint(tasks_now)
            fresh = table is not old or fingerprint != cached.fingerprint
            return _Planned(
                table=table,
                task_count=len(tasks_now),
                fingerprint=fingerprint,
                fresh=fresh,
                notes=notes,
                changed=labelled,
            )
    else:
        kept, labelled, found = {}, {}, drift.InputDrift()
    inp = settings.input
    tasks = build_tasks([rel for rel, _ in listed.files], inp.files_per_task)
    fingerprint = runjson.fingerprint(t.task_id for t in tasks)
    table = plan.build(
        listed.files,
        files_per_task=inp.files_per_task,
        total_shards=settings.total_shards,
        minimum_shard_index=settings.minimum_shard_index,
        category_regex=inp.category_regex,
        tasks=tasks,
        versions=versions,
    )
    return _Planned(
        table=plan.with_identities(table, kept),
        task_count=len(tasks),
        fingerprint=fingerprint,
        fresh=True,
        notes=notes,
        changed=labelled,
        input_drift=found,
    )


def _unknown(table: pa.Table, now: dict[str, str]) -> dict[str, str]:
    """Identities for files planned before identities were recorded."""
    planned = zip(table["file"].to_pylist(), table["identity"].to_pylist(), strict=True)
    return {rel: now[rel] for rel, known in planned if known is None and rel in now}


def _changed_in_place(
    table: pa.Table, now: dict[str, str], output: Location
) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """Files whose identity changed since planned: (labelled ones: file -> (planned, now);
    unlabelled ones: file -> now, whose new identity the plan simply takes). The output's
    markers are listed only when something changed."""
    changed = plan.changed_files(table, now)
    if not changed:
        return {}, {}
    marked = outputs.marked(output)
    labelled = {rel: c for rel, c in changed.items() if rel in marked}
    return labelled, {rel: b for rel, (_a, b) in changed.items() if rel not in marked}


def _built_for_another(cached: plan.PlanSummary, settings: Settings) -> bool:
    """Whether a cached plan was built for another assignment than ``settings`` ask for."""
    asked = (settings.total_shards, settings.minimum_shard_index, settings.input.files_per_task)
    built = (cached.shards_total, cached.minimum_shard_index, cached.files_per_task)
    return any(b is not None and b != a for b, a in zip(built, asked, strict=True))


def _drift(old: pa.Table, listed: listing.Listed, quarantined: set[str]) -> drift.InputDrift:
    """Listed files the plan lacks, planned files gone (a quarantined one may go freely)."""
    planned = set(old["file"].to_pylist())
    now = {rel for rel, _ in listed.files}
    return drift.InputDrift.of(now - planned, planned - now - quarantined)


#: Fields of run.json that never change, not even by --repin.
def is_dry_run(workflow: Any) -> bool:
    """Whether this invocation is a dry run, already at parse time (``workflow.dryrun`` is
    known only later): a dry run, what an operator runs beside a live run, never locks."""
    output = getattr(workflow, "output_settings", None)
    return bool(workflow.dryrun or getattr(output, "dryrun", False))
