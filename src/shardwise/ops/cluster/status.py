"""``shardwise cluster status``: what SLURM is doing to this run, right now.

The run's jobs are found as restarts find them (``planner.inflight``): the claims of
running shards, and the queued jobs of the run's last top-level invocation, with the
shards read from each job's ``--target-jobs`` (job names change with every invocation).
``ops/cluster/asking.py`` makes the SLURM calls; :func:`build` reads only the run directory.
"""

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.errors import RecordError
from shardwise.ops.cluster import facts as cluster_facts
from shardwise.ops.cluster.asking import (
    StatusFacts,
    job_number,
    main_process,
    probed_job,
    run_jobs,
    status_facts,
)
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.walltime import probe as walltime_probe
from shardwise.ops.walltime import rows as walltime_rows
from shardwise.ops.walltime.rows import Probe
from shardwise.planner import inflight
from shardwise.run import adaptation, claims, jobevents, markers
from shardwise.slurm import command, queries
from shardwise.slurm.pending import explain


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
    ordered = sorted(mine.values(), key=lambda x: job_number(x[0].id))
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
        main_process=main_process(submitter),
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
