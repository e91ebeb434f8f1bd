"""``shardwise cluster status``: what SLURM is doing to this run, right now.

The run's jobs are found as restarts find them (``planner.inflight``): the claims of
running shards, and the queued jobs of the run's last top-level invocation, with the
shards read from each job's ``--target-jobs`` (job names change with every invocation).
:func:`status_facts` makes the SLURM calls; :func:`build` reads only the run directory.
"""

import functools
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.errors import RecordError
from shardwise.ops import cluster_check, coverage, plan_probe, walltime_probe
from shardwise.ops.plan_probe import Planned
from shardwise.ops.text import format_duration
from shardwise.ops.walltime_probe import Probe
from shardwise.planner import inflight
from shardwise.run import adaptation, claims, markers, ranges
from shardwise.slurm import command, control, queries
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

    @property
    def running(self) -> list[RunJob]:
        """Jobs holding an allocation."""
        return [j for j in self.jobs if j.state in {"RUNNING", "COMPLETING", "CONFIGURING"}]

    @property
    def pending_jobs(self) -> list[RunJob]:
        """Jobs waiting to start."""
        return [j for j in self.jobs if j.state == "PENDING"]

    def text(self) -> str:
        """The table a person reads (``format_table``)."""
        return format_table(self)


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


def status_facts(run_dir: Path, *, timeout: float = command.DEFAULT_TIMEOUT) -> StatusFacts:
    """Ask SLURM what the view needs (the walltime probe only when a job pends)."""
    user = queries.current_user()
    queue = queries.jobs(user, timeout=timeout)
    cleared = plan_probe.clear_leftovers(queue, timeout)
    if _clear_leftover_probes(user, queue, timeout) or cleared:
        queue = queries.jobs(user, timeout=timeout)
    cfg = queries.config(timeout=timeout)
    accounting = cfg.ok and queries.accounting_enabled(cfg.value or {})
    why = "accounting is off: the submit cap is unknown"
    off: Answer[queries.Limits] = Answer(None, why, "failed")
    limits = queries.limits(user, timeout=timeout) if accounting or not cfg.ok else off
    nodes = queries.nodes(timeout=timeout)
    mine = run_jobs(run_dir, queue.value or [], claims.Submitter.recorded(run_dir))
    oldest = probed_job(mine)
    detail = None
    starts: dict[int, Answer[datetime]] = {}
    windows = None
    hidden: Answer[walltime_probe.Located] | None = None
    planned: Planned | None = None
    if oldest is not None:
        windows = queries.reservations(timeout=timeout)
        detail = queries.job_detail(oldest.id, timeout=timeout)
        if detail.ok and detail.value:
            shards = len(mine[oldest.id][1]) or 1
            request = detail.value
            options = functools.partial(walltime_probe.test_only_options, request)
            asked = walltime_probe.probe_minutes(oldest.time_limit_minutes, shards)
            ask = _test_only(starts, options, timeout)
            walltime_probe.longest_starting_now(ask, asked, datetime.now())
            reserved = walltime_probe.waits_for_reservation(oldest.reason)
            if reserved:  # first: it waits for a live workflow's probes, which would
                # refuse the allocations below for priority while they pend
                bf = queries.backfill_interval_seconds(cfg.value or {}) if cfg.ok else 30
                own = oldest.time_limit_minutes or 1
                planned = plan_probe.probe(options, own, 1, bf_interval=bf, timeout=timeout)
            if reserved and not _visible_window(windows, oldest):
                hidden = locate_window(request, asked, timeout)
    others = None
    private = cfg.ok and "jobs" in queries.private_data(cfg.value or {})
    parts = sorted({p for j, _ in mine.values() for p in j.partition.split(",") if p})
    if parts and not private:
        found = queries.partition_jobs(parts, timeout=timeout)
        others = Answer([j for j in found.value or [] if j.user != user]) if found.ok else found
    return StatusFacts(
        user=user,
        now=datetime.now(),
        queue=queue,
        config=cfg,
        nodes=nodes,
        limits=limits,
        others=others,
        probe_detail=detail,
        probe_starts=starts,
        reservations=windows,
        hidden_window=hidden,
        planned=planned,
    )


def probed_job(mine: dict[str, tuple[queries.Job, tuple[int, ...]]]) -> queries.Job | None:
    """The pending job the walltime probe asks about: the oldest that waits for a
    reservation, else the oldest (SLURM gives untested jobs the reason ``Priority``)."""
    waiting = [j for j, _ in mine.values() if j.pending]
    pending = sorted(waiting, key=lambda j: (j.submit_time or datetime.max, _int(j.id)))
    reserved = [j for j in pending if walltime_probe.waits_for_reservation(j.reason)]
    return (reserved or pending or [None])[0]


def _visible_window(windows: Answer[list[queries.Reservation]] | None, job: queries.Job) -> bool:
    """Whether a maintenance window ahead is visible for the job's partitions."""
    if windows is None or not windows.ok:
        return False
    parts = [p for p in job.partition.split(",") if p]
    return queries.next_maintenance(windows.value or [], datetime.now(), parts) is not None


def locate_window(
    request: dict[str, str], asked: list[int], timeout: float
) -> Answer[walltime_probe.Located]:
    """Where a hidden window starts, and how it was found: where a small job's
    ``--test-only`` answer steps, if the delay SLURM adds for the jobs ahead lets it show;
    else the longest 1-CPU job SLURM allocates at once (``salloc --immediate``)."""
    began, now = time.monotonic(), datetime.now()
    options = functools.partial(walltime_probe.window_options, request)
    small: dict[int, Answer[datetime]] = {}
    step, base = walltime_probe.step_limit(_test_only(small, options, timeout), asked)
    failed = next((a for a in small.values() if not a.ok), None)
    if base.value is None or (step is None and failed is not None):
        return Answer(None, (failed or base).problem, (failed or base).kind)
    if step is not None:
        changed = "nothing: sbatch --test-only submits nothing"
        return Answer(_located(step, walltime_probe.Method.INFERRED, len(small), began, changed))
    delay = base.value - now
    if delay <= timedelta(minutes=1):
        why = f"a small job of {max(asked)} min starts now: no window is in this job's way"
        return Answer(None, why, "failed")
    tried: dict[int, Answer[control.Allocation]] = {}

    def granted(minutes: int) -> bool | None:
        if minutes not in tried:
            tried[minutes] = control.try_allocation(options(minutes), timeout)
        answer = tried[minutes]
        return answer.value is control.Allocation.ALLOCATED if answer.ok else None

    found = walltime_probe.longest_where(granted, asked, within=1)
    outcomes = Counter(a.value for a in tried.values() if a.ok)
    changed = f"{len(tried)} job(s) of 1 CPU named {control.PROBE_JOB_NAME} (salloc --immediate=1):"
    changed += f" {outcomes[control.Allocation.ALLOCATED]} allocated and given back at once, the "
    changed += "others refused or revoked within a second; no job of yours was touched"
    if found is not None:
        method = walltime_probe.Method.ALLOCATED
        return Answer(_located(found, method, len(small) + len(tried), began, changed))
    failed = next((a for a in tried.values() if not a.ok), None)
    if failed is not None:
        return Answer(None, f"{failed.problem} ({changed})", failed.kind)
    return Answer(None, f"{_unlocated(outcomes, max(tried), delay)} ({changed})", "failed")


def _unlocated(outcomes: Counter, longest: int, delay: timedelta) -> str:
    """Why neither method located the window."""
    if outcomes[control.Allocation.ALLOCATED]:
        return f"a 1-CPU job of {longest} min was allocated at once: no window is in the way"
    why = f"sbatch --test-only adds {format_duration(delay.total_seconds())} for the pending "
    why += "jobs ahead, which hides the window, and no 1-CPU job was allocated at any limit: "
    if outcomes[control.Allocation.OUTRANKED]:
        why += "SLURM refused them for insufficient priority (a runnable job of higher priority "
        return why + "pends in the partition, perhaps hidden from you); ask again in a minute"
    return why + "the window may be open already, or the partition's nodes are full"


def _located(
    minutes: int, method: walltime_probe.Method, calls: int, began: float, changed: str
) -> walltime_probe.Located:
    """A window ``minutes`` from now, found by ``method`` in ``calls`` since ``began``."""
    start = (datetime.now() + timedelta(minutes=minutes)).isoformat(timespec="seconds")
    seconds = round(time.monotonic() - began, 1)
    return walltime_probe.Located(
        minutes=minutes, start=start, method=method, calls=calls, seconds=seconds, changed=changed
    )


def _clear_leftover_probes(user: str, queue: Answer[list[queries.Job]], timeout: float) -> int:
    """Wait a few seconds for window probes a killed ``cluster status`` left (each ends
    within a second on its own), then cancel any still queued; how many there were."""
    probes = control.PROBE_JOB_NAME
    left = [j.id for j in queue.value or [] if j.name == probes]
    deadline = time.monotonic() + 5
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        again = queries.jobs(user, timeout=timeout)
        left = [j.id for j in again.value or [] if j.name == probes and j.id in left]
    if left:
        control.cancel(left, timeout=timeout)
    return len(left)


def _test_only(
    answers: dict[int, Answer[datetime]], options: Callable[[int], list[str]], timeout: float
) -> Callable[[int], Answer[datetime]]:
    """``sbatch --test-only`` at a time limit, each limit asked once (kept in ``answers``)."""

    def ask(minutes: int) -> Answer[datetime]:
        if minutes not in answers:
            answers[minutes] = queries.test_only(options(minutes), timeout=timeout)
        return answers[minutes]

    return ask


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
        notes.append("other users' jobs are hidden (PrivateData=jobs): how many jobs are ahead "
                     "of yours is unknown")  # fmt: skip
    elif facts.others is not None and facts.others.ok:
        c = Counter(j.state for j in facts.others.value or [])
        others = {"pending": c.get("PENDING", 0), "running": c.get("RUNNING", 0)}
    return Status(
        run_dir=str(run_dir), generated_at=now.isoformat(timespec="seconds"), user=facts.user,
        main_process=_main_process(submitter), jobs=jobs,
        user_jobs=len(queue) if facts.queue.ok else None, submit_cap=cap, cap_source=source,
        pending=_pending(jobs), probe=_probe(run_dir, facts, mine, now),
        progress=_progress(run_dir, jobs, now), in_flight=flight,
        nodes=_unavailable_nodes(facts, jobs), others=others, notes=tuple(notes) + flight.notes,
        adapted=_adapted(run_dir, notes),
    )  # fmt: skip


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
    cap, source = cluster_check.submit_cap(account, qos, limits)
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
        shards_done=cov.shards_done, shards_total=cov.shards_total,
        last_finished=datetime.fromtimestamp(last).isoformat(timespec="seconds") if last else None,
        seconds_since_last=round(now.timestamp() - last, 1) if last else None,
        finished_last_hour=int((finished >= now.timestamp() - 3600).sum()),
        gpus_running=gpus_running, eta_seconds=round(eta, 1) if eta is not None else None,
    )  # fmt: skip


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
    since = inflight.local_time(submitter.started_at)
    return {"host": submitter.host, "pid": submitter.pid, "alive": alive, "since": since}


def _probe(
    run_dir: Path, facts: StatusFacts, mine: dict[str, tuple[queries.Job, tuple[int, ...]]],
    now: datetime,
) -> Probe | None:  # fmt: skip
    """The walltime probe of :func:`probed_job`, if one of the run's jobs pends."""
    oldest = probed_job(mine)
    if oldest is None:
        return None
    detail = facts.probe_detail
    return walltime_probe.probe(
        oldest, len(mine[oldest.id][1]) or 1, facts.probe_starts if detail is not None else {},
        reservations=facts.reservations, nodes=facts.nodes, now=now, hidden=facts.hidden_window,
        run_dir=str(run_dir),
        planned=walltime_probe.planned(detail.value if detail is not None else None),
        plan=facts.planned,
    )  # fmt: skip


def status(run_dir: Path, *, timeout: float = command.DEFAULT_TIMEOUT) -> Status:
    """``shardwise cluster status``: ask SLURM (with ``timeout`` per command), then build."""
    return build(run_dir, status_facts(run_dir, timeout=timeout))


def to_dict(status: Status) -> dict[str, Any]:
    """The JSON document (schema: docs/schemas/cluster-status.schema.json)."""
    gpus = sum(j.gpus for j in status.running)
    counts = {"running": len(status.running), "pending": len(status.pending_jobs),
              "gpus_in_use": gpus}  # fmt: skip
    slots = {"run": len(status.jobs), "user": status.user_jobs, "cap": status.submit_cap,
             "cap_source": status.cap_source}  # fmt: skip
    return {
        "format_version": 1, "command": "cluster status", "run_dir": status.run_dir,
        "generated_at": status.generated_at, "user": status.user,
        "main_process": status.main_process, "counts": counts, "gpus_in_use": _gpu_usage(status),
        "jobs": [{**asdict(j), "shards": list(j.shards)} for j in status.jobs],
        "submit_slots": slots, "pending_reasons": [dict(p) for p in status.pending],
        "walltime_probe": None if status.probe is None else asdict(status.probe),
        "progress": asdict(status.progress), "in_flight": status.in_flight.to_dict(),
        "unavailable_nodes": [dict(n) for n in status.nodes], "other_users": status.others,
        "notes": list(status.notes),
        "walltime_adaptation": None if status.adapted is None else status.adapted.to_json(),
    }  # fmt: skip


def _gpu_usage(status: Status) -> list[dict[str, Any]]:
    usage: Counter[tuple[str, str]] = Counter()
    for j in status.running:
        for kind, n in (j.gpu_types or {"gpu": j.gpus}).items():
            if n:
                usage[(j.partition, kind)] += n
    return [{"partition": p, "type": t, "gpus": n} for (p, t), n in sorted(usage.items())]


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{format_duration(seconds)} ago"


def format_table(status: Status) -> str:
    """The plain-text view (also what --watch redraws)."""
    lines = [f"cluster status of {status.run_dir} at {status.generated_at} (user {status.user})"]
    lines += _head_lines(status)
    listed = {s for j in status.jobs for s in j.shards}
    if set(status.in_flight.shards) - listed:  # shards of local processes or unlisted jobs
        lines += ["", *status.in_flight.lines(notes=False, planning=False)]
    lines += _job_lines(status)
    if status.pending:
        lines += ["", "pending, by reason"]
        for g in status.pending:
            lines.append(f"  {len(g['jobs'])} job(s), {g['shards']} shard(s): {g['reason']}")
            lines.append(f"      {g['meaning']}")
            lines.append(f"      do: {g['action']}")
    if status.probe is not None:
        lines += _probe_lines(status.probe)
    if status.adapted is not None:
        lines += adaptation_lines(status.adapted, datetime.fromisoformat(status.generated_at))
    if status.nodes:
        lines += ["", "nodes that cannot run jobs (sinfo -R)"]
        for n in status.nodes:
            since = f" since {n['since']}" if n["since"] else ""
            reason = n["reason"] or "none given"
            lines.append(f"  {n['node']:<12} {n['state']:<10} reason: {reason}{since}")
    if status.notes:
        lines += ["", *[f"note: {n}" for n in status.notes]]
    return "\n".join(lines)


_GONE = "GONE (run snakemake again: shards that live jobs still hold are not submitted twice)"


def _head_lines(status: Status) -> list[str]:
    """The main process, job and slot counts, GPUs in use, shard progress, other users."""
    lines = []
    m = status.main_process
    if m["pid"]:
        alive = {True: "running", None: "on another host: cannot check"}.get(m["alive"], _GONE)
        lines.append(f"main process  pid {m['pid']} on {m['host']} since {m['since']}: {alive}")
    cap = f"(submit cap: {status.cap_source})"
    if status.submit_cap is not None:
        cap = f"of cap {status.submit_cap:,} ({status.cap_source})"
    user_jobs = "?" if status.user_jobs is None else f"{status.user_jobs:,}"
    text = f"jobs          {len(status.running)} running, {len(status.pending_jobs)} pending "
    lines.append(text + f"(this run); submit slots: run {len(status.jobs)}, you {user_jobs} {cap}")
    usage = _gpu_usage(status)
    types = ", ".join(f"{u['partition']} {u['type']} x{u['gpus']}" for u in usage)
    lines.append(f"GPUs in use   {sum(u['gpus'] for u in usage)}" + (f": {types}" if usage else ""))
    p = status.progress
    eta = "no ETA: no GPU of this run is running" if p.shards_done < p.shards_total else ""
    if p.eta_seconds is not None:
        eta = f"ETA {format_duration(p.eta_seconds)} at the {p.gpus_running} GPU(s) running now"
    text = f"shards        {p.shards_done:,} / {p.shards_total:,} done; last finished "
    text += f"{_ago(p.seconds_since_last)}; {p.finished_last_hour:,} in the last hour; {eta}"
    lines.append(text)
    if status.others is not None:
        text = f"other users   {status.others['pending']:,} pending, {status.others['running']:,} "
        lines.append(text + "running in these partitions")
    return lines


def _job_lines(status: Status) -> list[str]:
    """One row per job of the run."""
    if not status.jobs:
        return []
    pw = max(len("partition"), *(len(j.partition) for j in status.jobs))
    head = f"{'job':<9} {'state':<10} {'shards':<13} GPUs  {'limit':<7} {'partition':<{pw}}  "
    lines = ["", head + "started / pending reason"]
    for j in status.jobs:
        tail = j.reason if j.state == "PENDING" else f"{j.started or j.submitted} on {j.nodes}"
        limit = f"{j.time_limit_minutes}m" if j.time_limit_minutes else "?"
        text = f"{j.id:<9} {j.state:<10} {ranges.compress(list(j.shards)):<13} {j.gpus:>4}  "
        lines.append(text + f"{limit:<7} {j.partition:<{pw}}  {tail}")
    return lines


def _probe_lines(pr: Probe) -> list[str]:
    """Would a shorter walltime start now: one row per limit asked about, then the advice."""
    sources = "the visible windows, nothing submitted"
    if pr.located is not None:
        sources = "the hidden window, located below"
    if pr.planned is not None:  # probes were submitted: see the line below the rows
        sources = sources.removesuffix(", nothing submitted")
        sources += "; SLURM's own plan for probe jobs of your request"
    head = f"would a shorter walltime start now? (pending job {pr.job_id}, {pr.shards} shard(s), "
    head += f"submitted {pr.submitted}; sbatch --test-only and {sources})"
    lines = ["", head]
    for r in pr.rows:
        when = r.start.replace("T", " ") if r.start else f"? {r.problem}"
        when = "now" if r.starts_now else when
        origin = f"  [{r.source}]" if r.method is not walltime_probe.Method.TEST_ONLY else ""
        lines.append(f"  {r.minutes:>6} min  ({r.label:<23})  expected start: {when}{origin}")
    if pr.located is not None:
        found = pr.located
        how = "1-CPU allocations"
        if found.method is walltime_probe.Method.INFERRED:
            how = "small sbatch --test-only jobs"
        text = f"  window located with {how}: {found.calls} SLURM call(s) in {found.seconds:g} s; "
        lines.append(text + f"submitted: {found.changed}")
    if pr.planned is not None:
        plan = pr.planned
        text = f"  SLURM's plan asked with probe jobs of your request: {plan.calls} SLURM call(s) "
        lines.append(text + f"in {plan.seconds:g} s; submitted: {plan.changed()}")
    lines.append(f"  => {pr.advice}")
    return lines


def adaptation_lines(record: adaptation.Adaptation, now: datetime, last: int = 6) -> list[str]:
    """What the workflow's walltime adaptation did: the fit in force, the last changes."""
    fit = record.fit
    lines = ["", "walltime adaptation (walltime.adapt: the workflow changes limits by itself)"]
    if fit is not None and fit.cap(now) is not None:
        text = f"  in force: jobs end by {fit.horizon.replace('T', ' ')} (at most {fit.cap(now)} "
        lines.append(text + f"min now, never below {fit.floor}); since {fit.since}: {fit.reason}")
    else:
        lines.append("  in force: the configured limits")
    for event in record.events[-last:]:
        lines.append(f"  {event.at.replace('T', ' ')}  {event.action:<9} {event.text}")
    return lines
