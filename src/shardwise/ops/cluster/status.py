"""``shardwise cluster status``: what SLURM is doing to this run, right now.

The run's jobs are found as restarts find them (``planner.inflight``): the claims of
running shards, and the queued jobs of the run's last top-level invocation, with the
shards read from each job's ``--target-jobs`` (job names change with every invocation).
:func:`status_facts` makes the SLURM calls; :func:`build` reads only the run directory.
"""

import functools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.errors import RecordError
from shardwise.ops.cluster import facts as cluster_facts
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.walltime import plan_probe
from shardwise.ops.walltime import probe as walltime_probe
from shardwise.ops.walltime import rows as walltime_rows
from shardwise.ops.walltime.plan_probe import Planned
from shardwise.ops.walltime.rows import Probe
from shardwise.planner import inflight
from shardwise.run import adaptation, claims, jobevents, markers
from shardwise.slurm import command, queries
from shardwise.slurm.pending import explain
from shardwise.slurm.queries import Answer


@dataclass(frozen=True, kw_only=True)
class RunJob:
    """One SLURM job of the run."""

    id: str
    state: str
    reason: str
    shards: tuple[int, ...]
    gpus: int
    gpu_types: dict[str, int]
    partition: str
    time_limit_minutes: int | None
    submitted: str
    started: str
    nodes: str
    qos: str = ""
    restarts: int = 0  # times SLURM requeued it (preempted, node failure)


@dataclass(frozen=True, kw_only=True)
class Progress:
    """Shards done over time, and the ETA at the GPUs running now."""

    shards_done: int
    shards_total: int
    last_finished: str | None
    seconds_since_last: float | None
    finished_last_hour: int
    gpus_running: int
    eta_seconds: float | None


@dataclass(frozen=True, kw_only=True)
class Status:
    """Everything the status view shows."""

    run_dir: str
    generated_at: str
    user: str
    main_process: dict[str, Any]
    jobs: tuple[RunJob, ...]
    user_jobs: int | None
    submit_cap: int | None
    cap_source: str
    pending: tuple[dict[str, Any], ...]
    probe: Probe | None
    progress: Progress
    in_flight: inflight.InFlight
    nodes: tuple[dict[str, str], ...]
    others: dict[str, int] | None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: What the workflow's walltime adaptation changed (run/adaptation), when it did.
    adapted: adaptation.Adaptation | None = None
    #: Preemptions, node failures and lost jobs of the run (run/jobevents).
    fates: jobevents.Tally = field(default_factory=jobevents.Tally)

    @property
    def running(self) -> list[RunJob]:
        """Jobs holding an allocation."""
        return [j for j in self.jobs if j.state in {"RUNNING", "COMPLETING", "CONFIGURING"}]

    @property
    def pending_jobs(self) -> list[RunJob]:
        """Jobs waiting to start."""
        return [j for j in self.jobs if j.state == "PENDING"]


@dataclass(frozen=True, kw_only=True)
class StatusFacts:
    """What SLURM said, gathered once for one view."""

    user: str
    now: datetime
    queue: Answer[list[queries.Job]]
    config: Answer[dict[str, str]]
    nodes: Answer[list[queries.Node]]
    limits: Answer[queries.Limits]
    others: Answer[list[queries.Job]] | None
    probe_detail: Answer[dict[str, str]] | None
    probe_starts: dict[int, Answer[datetime]]
    reservations: Answer[list[queries.Reservation]] | None = None
    #: A window hidden from the user, located blind: where it starts, and how.
    hidden_window: Answer[walltime_probe.Located] | None = None
    #: SLURM's plan for probe jobs of the pending job's request (what really starts now).
    planned: Planned | None = None
    #: The live workflow's walltime fit in force: shown as the answer, no probe made.
    fit: adaptation.Fit | None = None
    #: A live workflow of the run that adapts its walltimes: it probes, this view does not.
    adapting: claims.Submitter | None = None
    #: Why ``sbatch --test-only`` was not asked (its answer is known to be wrong here).
    untrusted: str | None = None


def run_jobs(
    run_dir: Path, queue: list[queries.Job], submitter: claims.Submitter | None
) -> dict[str, tuple[queries.Job, tuple[int, ...]]]:
    """The run's live jobs (job id -> job, shards), from claims and the queue."""
    by_id = {j.id: j for j in queue}
    out: dict[str, tuple[queries.Job, tuple[int, ...]]] = {}
    if submitter is not None:
        for job, shards in inflight.queued_shards(run_dir, submitter, queue).items():
            out[job.id] = (job, tuple(shards))
    for shard, claim in claims.read_claims(run_dir).items():
        job = by_id.get(claim.slurm_job_id or "")
        if job is not None and job.id not in out:
            out[job.id] = (job, (shard,))
    return out


def fit_in_force(run_dir: Path, now: datetime) -> adaptation.Fit | None:
    """The live workflow's walltime fit, while in force: SLURM's plan it already asked,
    which a second probe by ``cluster status`` would only contradict or repeat."""
    try:
        record = adaptation.load(run_dir)
    except RecordError:
        return None
    fit = record.fit if record is not None else None
    if fit is None or fit.cap(now) is None:
        return None
    return fit if _main_process(claims.Submitter.recorded(run_dir))["alive"] else None


@dataclass(frozen=True)
class _ProbeFacts:
    """What the walltime probe asked SLURM about the oldest pending job."""

    detail: Answer[dict[str, str]] | None = None
    starts: dict[int, Answer[datetime]] = field(default_factory=dict)
    windows: Answer[list[queries.Reservation]] | None = None
    hidden: Answer[walltime_probe.Located] | None = None
    planned: Planned | None = None


def status_facts(
    run_dir: Path, *, timeout: float = command.DEFAULT_TIMEOUT, probe: bool = False
) -> StatusFacts:
    """Ask SLURM what the view needs (the walltime probe only when a job pends, and not
    while the workflow's own adaptation is in force or a live workflow adapts, unless
    ``probe`` asks for it)."""
    user = queries.current_user()
    queue = queries.jobs(user, timeout=timeout)
    cleared = plan_probe.clear_leftovers(queue, timeout)
    if walltime_probe.clear_leftover_probes(user, queue, timeout) or cleared:
        queue = queries.jobs(user, timeout=timeout)
    cfg = queries.config(timeout=timeout)
    accounting = cfg.ok and queries.accounting_enabled(cfg.value or {})
    why = "accounting is off: the submit cap is unknown"
    off: Answer[queries.Limits] = Answer(None, why, "failed")
    limits = queries.limits(user, timeout=timeout) if accounting or not cfg.ok else off
    mine = run_jobs(run_dir, queue.value or [], claims.Submitter.recorded(run_dir))
    oldest = probed_job(mine)
    fitted = None if probe else fit_in_force(run_dir, datetime.now())
    adapting = None if probe or fitted is not None else adapting_workflow(run_dir)
    if fitted is not None or adapting is not None:
        oldest = None  # the workflow's fit is the answer, or it probes itself: one probe
    untrusted = test_only_untrusted(oldest, cfg.value or {}) if oldest is not None else None
    asked = _probe_facts(mine, oldest, cfg, untrusted, timeout) if oldest else _ProbeFacts()
    return StatusFacts(
        user=user,
        now=datetime.now(),
        queue=queue,
        config=cfg,
        nodes=queries.nodes(timeout=timeout),
        limits=limits,
        others=_others(user, mine, cfg, timeout),
        probe_detail=asked.detail,
        probe_starts=asked.starts,
        reservations=asked.windows,
        hidden_window=asked.hidden,
        planned=asked.planned,
        fit=fitted,
        adapting=adapting,
        untrusted=untrusted,
    )


def _probe_facts(
    mine: dict[str, tuple[queries.Job, tuple[int, ...]]],
    oldest: queries.Job,
    cfg: Answer[dict[str, str]],
    untrusted: str | None,
    timeout: float,
) -> _ProbeFacts:
    """``--test-only`` (where its answer can stand), SLURM's plan for probe jobs of the
    request (while it pends for a reservation) and a hidden window located blind."""
    windows = queries.reservations(timeout=timeout)
    detail = queries.job_detail(oldest.id, timeout=timeout)
    if not detail.ok or not detail.value:
        return _ProbeFacts(detail=detail, windows=windows)
    starts: dict[int, Answer[datetime]] = {}
    request = detail.value
    options = functools.partial(walltime_probe.test_only_options, request)
    asked = walltime_probe.probe_minutes(oldest.time_limit_minutes, len(mine[oldest.id][1]) or 1)
    if untrusted is None:
        ask = walltime_probe.test_only(starts, options, timeout)
        walltime_probe.longest_starting_now(ask, asked, datetime.now())
    if not walltime_probe.waits_for_reservation(oldest.reason):
        return _ProbeFacts(detail=detail, starts=starts, windows=windows)
    # first: it waits for a live workflow's probes, which would refuse the allocations
    # below for priority while they pend
    bf = queries.backfill_interval_seconds(cfg.value or {}) if cfg.ok else 30
    own = oldest.time_limit_minutes or 1
    planned = plan_probe.probe(options, own, 1, bf_interval=bf, timeout=timeout)
    hidden = None
    if not walltime_probe.visible_window(windows, oldest):
        hidden = walltime_probe.locate_window(request, asked, timeout)
    return _ProbeFacts(detail, starts, windows, hidden, planned)


def _others(
    user: str,
    mine: dict[str, tuple[queries.Job, tuple[int, ...]]],
    cfg: Answer[dict[str, str]],
    timeout: float,
) -> Answer[list[queries.Job]] | None:
    """Other users' jobs in the run's partitions (None: hidden, or no partition)."""
    private = cfg.ok and "jobs" in queries.private_data(cfg.value or {})
    parts = sorted({p for j, _ in mine.values() for p in j.partition.split(",") if p})
    if not parts or private:
        return None
    found = queries.partition_jobs(parts, timeout=timeout)
    return Answer([j for j in found.value or [] if j.user != user]) if found.ok else found


def adapting_workflow(run_dir: Path) -> claims.Submitter | None:
    """The run's live workflow on a cluster (its walltime adaptation probes SLURM's plan
    itself while a job pends for a reservation); None when none is known to be live."""
    submitter = claims.Submitter.recorded(run_dir)
    if submitter is None or not submitter.cluster:
        return None
    try:
        record = adaptation.load(run_dir)
    except RecordError:
        return None
    since = inflight.local_time(record.since) if record and record.since else None
    began = inflight.local_time(submitter.started_at)
    if since is None or began is None or since < began:  # walltime.adapt is off for it
        return None
    return submitter if _main_process(submitter)["alive"] else None


def test_only_untrusted(job: queries.Job, cfg: dict[str, str]) -> str | None:
    """Why ``sbatch --test-only`` would answer wrongly for ``job``: it tests one partition
    of a list, and under PrivateData it places its test job behind the user's own pending
    ones (checked on the test cluster); None when its answer can stand."""
    if "," in job.partition:
        return f"job {job.id} may start in any of {job.partition}, and --test-only tests one"
    if "jobs" in queries.private_data(cfg):
        return "PrivateData hides jobs, and --test-only answers behind your own pending jobs"
    return None


def probed_job(mine: dict[str, tuple[queries.Job, tuple[int, ...]]]) -> queries.Job | None:
    """The pending job the walltime probe asks about: the oldest that waits for a
    reservation, else the oldest (SLURM gives untested jobs the reason ``Priority``)."""
    waiting = [j for j, _ in mine.values() if j.pending]
    pending = sorted(waiting, key=lambda j: (j.submit_time or datetime.max, _int(j.id)))
    reserved = [j for j in pending if walltime_probe.waits_for_reservation(j.reason)]
    return (reserved or pending or [None])[0]


def _int(text: str) -> int:
    m = re.match(r"\d+", text)
    return int(m.group(0)) if m else 0


def build(run_dir: Path, facts: StatusFacts) -> Status:
    """The status view of ``run_dir`` from ``facts`` (reads only the run directory)."""
    now = facts.now
    notes: list[str] = []
    submitter = claims.Submitter.recorded(run_dir)
    queue = facts.queue.value or []
    if not facts.queue.ok:
        notes.append(f"squeue did not answer ({facts.queue.problem}): jobs unknown")
    if submitter is None:
        text = f"no {claims.WORKFLOW_JSON} in {run_dir / claims.CLAIMS_DIR}: only running shards "
        text += "(claims) are matched; run snakemake once with this version to record the workflow"
        notes.append(text)
    mine = run_jobs(run_dir, queue, submitter)
    ordered = sorted(mine.values(), key=lambda x: _int(x[0].id))
    jobs = tuple(_run_job(j, shards) for j, shards in ordered)
    flight = inflight.find(run_dir, submitter, done=markers.done_shards(run_dir), queue=facts.queue)
    cap, source = _submit_cap(facts, mine)
    if not facts.nodes.ok:
        notes.append(f"sinfo did not answer ({facts.nodes.problem})")
    others = None
    if facts.config.ok and "jobs" in queries.private_data(facts.config.value or {}):
        notes.append(
            "other users' jobs are hidden (PrivateData=jobs): how many jobs are ahead "
            "of yours is unknown"
        )
    elif facts.others is not None and facts.others.ok:
        c = Counter(j.state for j in facts.others.value or [])
        others = {"pending": c.get("PENDING", 0), "running": c.get("RUNNING", 0)}
    return Status(
        run_dir=str(run_dir),
        generated_at=now.isoformat(timespec="seconds"),
        user=facts.user,
        main_process=_main_process(submitter),
        jobs=jobs,
        user_jobs=len(queue) if facts.queue.ok else None,
        submit_cap=cap,
        cap_source=source,
        pending=_pending(jobs),
        probe=_probe(run_dir, facts, mine, now),
        progress=_progress(run_dir, jobs, now),
        in_flight=flight,
        nodes=_unavailable_nodes(facts, jobs),
        others=others,
        notes=tuple(notes + _fit_note(facts.fit) + _probe_notes(facts)) + flight.notes,
        adapted=_adapted(run_dir, notes),
        fates=jobevents.tally(jobevents.load(run_dir), now),
    )


def _fit_note(fit: adaptation.Fit | None) -> list[str]:
    """Why no walltime probe was made: the workflow's fit is in force (its evidence below)."""
    if fit is None:
        return []
    text = "no walltime probe: the workflow's adaptation is in force (jobs end by "
    text += f"{fit.horizon.replace('T', ' ')}; SLURM's plan at {fit.since}: {fit.reason}); "
    return [text + "`cluster status --probe` asks SLURM's plan again"]


def _probe_notes(facts: StatusFacts) -> list[str]:
    """Why this view made no probe of its own, or left ``--test-only`` out."""
    notes = []
    if facts.adapting is not None:
        who = f"pid {facts.adapting.pid} on {facts.adapting.host}"
        text = f"no walltime probe: the live workflow ({who}) adapts its walltimes itself and "
        text += "asks SLURM's plan while a job pends for a reservation; its answer shows here "
        notes.append(text + "once it has one (`cluster status --probe` asks anyway)")
    if facts.untrusted is not None:
        notes.append(f"sbatch --test-only not asked: {facts.untrusted}; SLURM's plan answers")
    return notes


def _adapted(run_dir: Path, notes: list[str]) -> adaptation.Adaptation | None:
    """The workflow's walltime adaptation record (a damaged one is a note, not a failure)."""
    try:
        return adaptation.load(run_dir)
    except RecordError as e:
        notes.append(f"the walltime adaptation's record cannot be read: {e}")
        return None


def _run_job(j: queries.Job, shards: tuple[int, ...]) -> RunJob:
    """One of the run's jobs as the view shows it."""
    submitted = j.submit_time.isoformat() if j.submit_time else ""
    started = j.start_time.isoformat() if j.start_time and j.running else ""
    types = queries.gpu_types(j.tres_alloc or j.tres_per_job)
    return RunJob(
        id=j.id,
        state=j.state,
        reason=j.reason,
        shards=shards,
        gpus=j.gpus,
        gpu_types=types,
        partition=j.partition,
        time_limit_minutes=j.time_limit_minutes,
        submitted=submitted,
        started=started,
        nodes=j.nodes,
        qos=j.qos,
        restarts=j.restarts,
    )


def _pending(jobs: tuple[RunJob, ...]) -> tuple[dict[str, Any], ...]:
    """The pending jobs grouped by reason, most jobs first, each with what it means."""
    groups: dict[str, list[RunJob]] = {}
    for j in jobs:
        if j.state == "PENDING":
            groups.setdefault(j.reason or "(none)", []).append(j)
    return tuple(
        {
            **asdict(explain(reason)),
            "reason": reason,
            "jobs": [j.id for j in js],
            "shards": sum(len(j.shards) for j in js),
        }
        for reason, js in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    )


def _submit_cap(
    facts: StatusFacts, mine: dict[str, tuple[queries.Job, tuple[int, ...]]]
) -> tuple[int | None, str]:
    """The submit cap of the account and QOS the run's jobs use most, and where it is from."""
    limits = facts.limits.value if facts.limits.ok else None
    account = _most_common(j.account for j, _ in mine.values())
    qos = _most_common(j.qos for j, _ in mine.values())
    if account is None and limits is not None:
        account = limits.default_account or None
    cap, source = cluster_facts.submit_cap(account, qos, limits)
    if limits is None:
        source = f"unknown ({facts.limits.problem})"
    return cap, source


def _most_common(values: Iterable[str]) -> str | None:
    found = Counter(values).most_common(1)
    return found[0][0] if found else None


def _progress(run_dir: Path, jobs: tuple[RunJob, ...], now: datetime) -> Progress:
    """Shards done, the last one finished, and the ETA at the GPUs running now."""
    state = coverage.load_state(run_dir)
    gpus_running = sum(j.gpus for j in jobs if j.state in {"RUNNING", "COMPLETING"})
    cov = coverage.compute(state, gpus=max(gpus_running, 1))
    finished = state.markers.finished_at[np.isfinite(state.markers.finished_at)]
    last = float(finished.max()) if finished.size else None
    eta = cov.eta.seconds if cov.eta is not None and gpus_running else None
    return Progress(
        shards_done=cov.shards_done,
        shards_total=cov.shards_total,
        last_finished=datetime.fromtimestamp(last).isoformat(timespec="seconds") if last else None,
        seconds_since_last=round(now.timestamp() - last, 1) if last else None,
        finished_last_hour=int((finished >= now.timestamp() - 3600).sum()),
        gpus_running=gpus_running,
        eta_seconds=round(eta, 1) if eta is not None else None,
    )


def _unavailable_nodes(facts: StatusFacts, jobs: tuple[RunJob, ...]) -> tuple[dict[str, str], ...]:
    """Nodes of the run's partitions that cannot run jobs, once each."""
    parts = {p for j in jobs for p in j.partition.split(",") if p}
    bad: dict[str, dict[str, str]] = {}
    for n in facts.nodes.value or [] if facts.nodes.ok else []:
        if (not parts or n.partition in parts) and not n.usable:
            row = {"node": n.name, "state": n.state, "reason": n.reason, "since": n.reason_time}
            bad.setdefault(n.name, {**row, "gres": n.gres})
    return tuple(bad.values())


def _main_process(submitter: claims.Submitter | None) -> dict[str, Any]:
    if submitter is None:
        return {"host": None, "pid": None, "alive": None, "since": None}
    alive: bool | None = None
    if submitter.host == claims.hostname() and submitter.pid:
        alive = claims.process_alive(submitter.pid, None)
    elif submitter.slurm_job_id:  # `shardwise launch`: its launcher job, on any node
        states = queries.job_states([submitter.slurm_job_id])
        state = (states.value or {}).get(submitter.slurm_job_id, "") if states.ok else None
        alive = None if state is None else state in queries.LIVE_STATES
    since = inflight.local_time(submitter.started_at)
    return {"host": submitter.host, "pid": submitter.pid, "alive": alive, "since": since}


def _probe(
    run_dir: Path,
    facts: StatusFacts,
    mine: dict[str, tuple[queries.Job, tuple[int, ...]]],
    now: datetime,
) -> Probe | None:
    """The walltime probe of :func:`probed_job`, if one of the run's jobs pends."""
    oldest = probed_job(mine)
    if oldest is None:
        return None
    detail = facts.probe_detail
    return walltime_rows.probe(
        oldest,
        len(mine[oldest.id][1]) or 1,
        facts.probe_starts if detail is not None else {},
        reservations=facts.reservations,
        nodes=facts.nodes,
        now=now,
        hidden=facts.hidden_window,
        run_dir=str(run_dir),
        planned=walltime_probe.planned(detail.value if detail is not None else None),
        plan=facts.planned,
    )


def status(
    run_dir: Path, *, timeout: float = command.DEFAULT_TIMEOUT, probe: bool = False
) -> Status:
    """``shardwise cluster status``: ask SLURM (with ``timeout`` per command), then build.
    ``probe``: ask SLURM's plan even while the workflow's own fit is in force."""
    return build(run_dir, status_facts(run_dir, timeout=timeout, probe=probe))
