"""``shardwise cluster status``: what SLURM is doing to this run, right now.

The run's jobs are found the way restarts find them (:mod:`shardwise.inflight`):
the claims of running shards, and the user's queued jobs whose submit directory,
Snakefile and config files are those of the run's last top-level invocation
(recorded in ``<run_dir>/claims/workflow.json``), with the shards read from each
job's ``--target-jobs``. The plugin's job names change with every invocation, so
they are not used.

:func:`gather` makes the SLURM calls (one ``squeue`` for the user's jobs, one
``sinfo``, ``sacctmgr`` for the cap, and for the oldest pending job one
``scontrol show job`` plus a few ``sbatch --test-only``); :func:`build` is pure.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from shardwise import (
    claims,
    clustercheck,
    inflight,
    markers,
    pendingreasons,
    ranges,
    slurmcmd,
    slurmstate,
)
from shardwise.slurmstate import Answer


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ProbeRow:
    """One answer to "when would a job asking for ``minutes`` start?".

    ``source`` says who answered: ``sbatch --test-only`` (SLURM's own plan), or
    ``reservation`` (the longest limit that ends before the next visible maintenance
    window, which a job pending behind that window cannot be refused for).
    """

    minutes: int
    label: str
    start: str | None
    starts_now: bool | None
    problem: str | None = None
    source: str = "sbatch --test-only"


@dataclass(frozen=True)
class Probe:
    """Would a shorter walltime start now? For the oldest pending job."""

    job_id: str
    shards: int
    submitted: str
    rows: tuple[ProbeRow, ...]
    advice: str


@dataclass(frozen=True)
class Progress:
    """Shards done over time, and the ETA at the GPUs running now."""

    shards_done: int
    shards_total: int
    last_finished: str | None
    seconds_since_last: float | None
    finished_last_hour: int
    gpus_running: int
    eta_seconds: float | None


@dataclass(frozen=True)
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

    @property
    def running(self) -> list[RunJob]:
        """Jobs holding an allocation."""
        return [j for j in self.jobs if j.state in {"RUNNING", "COMPLETING", "CONFIGURING"}]

    @property
    def pending_jobs(self) -> list[RunJob]:
        """Jobs waiting to start."""
        return [j for j in self.jobs if j.state == "PENDING"]


@dataclass(frozen=True)
class Facts:
    """What SLURM said, gathered once for one view."""

    user: str
    now: datetime
    queue: Answer[list[slurmstate.Job]]
    config: Answer[dict[str, str]]
    nodes: Answer[list[slurmstate.Node]]
    limits: Answer[slurmstate.Limits]
    others: Answer[list[slurmstate.Job]] | None
    probe_detail: Answer[dict[str, str]] | None
    probe_starts: dict[int, Answer[datetime]]
    reservations: Answer[list[slurmstate.Reservation]] | None = None


# ----------------------------------------------------------------------------- gather


def run_jobs(
    run_dir: Path, queue: list[slurmstate.Job], submitter: inflight.Submitter | None
) -> dict[str, tuple[slurmstate.Job, tuple[int, ...]]]:
    """The run's live jobs (job id -> job, shards), from claims and the queue."""
    by_id = {j.id: j for j in queue}
    out: dict[str, tuple[slurmstate.Job, tuple[int, ...]]] = {}
    if submitter is not None:
        for job, shards in inflight.queued_shards(run_dir, submitter, queue).items():
            out[job.id] = (job, tuple(shards))
    for shard, claim in claims.read_claims(run_dir).items():
        job = by_id.get(claim.slurm_job_id or "")
        if job is not None and job.id not in out:
            out[job.id] = (job, (shard,))
    return out


def gather(run_dir: Path, *, timeout: float = slurmcmd.DEFAULT_TIMEOUT) -> Facts:
    """Ask SLURM what the view needs (the walltime probe only when a job pends)."""
    user = slurmstate.current_user()
    queue = slurmstate.jobs(user, timeout=timeout)
    cfg = slurmstate.config(timeout=timeout)
    accounting = cfg.ok and slurmstate.accounting_enabled(cfg.value or {})
    limits: Answer[slurmstate.Limits] = (
        slurmstate.limits(user, timeout=timeout)
        if accounting or not cfg.ok
        else Answer(None, "accounting is off: the submit cap is unknown", "failed")
    )
    nodes = slurmstate.nodes(timeout=timeout)
    mine = run_jobs(run_dir, queue.value or [], inflight.Submitter.recorded(run_dir))
    pending = sorted(
        (j for j, _ in mine.values() if j.pending),
        key=lambda j: (j.submit_time or datetime.max, _int(j.id)),
    )
    detail = None
    starts: dict[int, Answer[datetime]] = {}
    windows = None
    if pending:
        windows = slurmstate.reservations(timeout=timeout)
        oldest = pending[0]
        detail = slurmstate.job_detail(oldest.id, timeout=timeout)
        if detail.ok and detail.value:
            shards = len(mine[oldest.id][1]) or 1
            request = detail.value

            def ask(minutes: int) -> Answer[datetime]:
                if minutes not in starts:
                    starts[minutes] = slurmstate.test_only(
                        test_only_options(request, minutes), timeout=timeout
                    )
                return starts[minutes]

            asked = probe_minutes(oldest.time_limit_minutes, shards)
            longest_starting_now(ask, asked, datetime.now())
    others = None
    private = cfg.ok and "jobs" in slurmstate.private_data(cfg.value or {})
    parts = sorted({p for j, _ in mine.values() for p in j.partition.split(",") if p})
    if parts and not private:
        reply = slurmcmd.run(
            ["squeue", "-h", "-t", "PD,R", "-p", ",".join(parts), "-o", "%u|%T"],
            timeout=timeout,
        )
        others = (
            Answer(
                [
                    _stub(r["user"], r["state"])
                    for r in slurmcmd.rows(reply.stdout, ("user", "state"))
                    if r["user"] != user
                ]
            )
            if reply.ok
            else Answer(None, reply.problem, reply.kind)
        )
    return Facts(user, datetime.now(), queue, cfg, nodes, limits, others, detail, starts, windows)


def _stub(user: str, state: str) -> slurmstate.Job:
    return slurmstate.Job(
        "", state, "", user, "", None, None, None, None, "", "", "", "", "", "", "", "", ""
    )


def _int(text: str) -> int:
    m = re.match(r"\d+", text)
    return int(m.group(0)) if m else 0


def probe_minutes(own: int | None, shards: int) -> list[int]:
    """Time limits to ask about: the job's own, half, a quarter, one shard's share."""
    if not own:
        return []
    candidates = {own, own // 2, own // 4, math.ceil(own / max(shards, 1))}
    return sorted((m for m in candidates if m >= 1), reverse=True)


def longest_starting_now(
    ask: Callable[[int], Answer[datetime]], asked: list[int], now: datetime
) -> int | None:
    """The longest time limit SLURM would start now, between the limits already ``asked``.

    When the job's own limit does not start now: bisect between the longest asked limit
    that starts now and the next longer one that does not (or halve below the shortest
    asked one until one starts now). At most ~2 log2(limit) more ``sbatch --test-only``
    calls, to within 5%; never a submission. None when nothing starts now or SLURM
    does not answer.
    """

    def starts_now(minutes: int) -> bool | None:
        answer = ask(minutes)
        if not answer.ok or answer.value is None:
            return None
        return answer.value <= now + timedelta(minutes=1)

    verdicts = {m: starts_now(m) for m in asked}
    if not verdicts or None in verdicts.values() or all(verdicts.values()):
        return None
    good = [m for m, v in verdicts.items() if v]
    if good:
        low = max(good)
        high = min(m for m, v in verdicts.items() if not v and m > low)
    else:
        high, probe, low = min(verdicts), min(verdicts) // 2, 0
        while probe >= 1:  # halve until something starts now
            verdict = starts_now(probe)
            if verdict is None:
                return None
            if verdict:
                low = probe
                break
            high, probe = probe, probe // 2
        if low == 0:
            return None
    while high - low > max(1, low // 20):
        mid = (low + high) // 2
        verdict = starts_now(mid)
        if verdict is None:
            break
        low, high = (mid, high) if verdict else (low, mid)
    return low


def test_only_options(detail: dict[str, str], minutes: int) -> list[str]:
    """``sbatch --test-only`` options that repeat a pending job's request at ``minutes``."""
    opts = ["-t", str(minutes)]
    null = slurmcmd.is_null

    def add(flag: str, key: str) -> None:
        value = detail.get(key)
        if not null(value):
            opts.extend([flag, str(value)])

    add("-p", "Partition")
    add("-A", "Account")
    add("--qos", "QOS")
    add("-C", "Features")
    add("--exclude", "ExcNodeList")
    add("--reservation", "Reservation")
    cpus = detail.get("CPUs/Task")
    if cpus and cpus.isdigit():
        opts.append(f"--cpus-per-task={cpus}")
    mem_node, mem_cpu = detail.get("MinMemoryNode"), detail.get("MinMemoryCPU")
    if mem_node and not null(mem_node):
        opts.append(f"--mem={mem_node}")
    elif mem_cpu and not null(mem_cpu):
        opts.append(f"--mem-per-cpu={mem_cpu}")
    per_job = detail.get("TresPerJob", "")
    per_node = detail.get("TresPerNode", "")
    m = re.search(r"gpu(?::([^:,=]+))?[:=](\d+)", per_job or "")
    if m:
        opts.append(f"--gpus={m.group(1) + ':' if m.group(1) else ''}{m.group(2)}")
    elif re.search(r"gpu", per_node or ""):
        opts.append("--gres=" + per_node.replace("gres:", "").replace("gres/", ""))
    return opts


# ----------------------------------------------------------------------------- build


def build(run_dir: Path, facts: Facts) -> Status:
    """The status view of ``run_dir`` from ``facts`` (reads only the run directory)."""
    from shardwise import coverage

    now = facts.now
    notes: list[str] = []
    submitter = inflight.Submitter.recorded(run_dir)
    queue = facts.queue.value or []
    if not facts.queue.ok:
        notes.append(f"squeue did not answer ({facts.queue.problem}): jobs unknown")
    if submitter is None:
        notes.append(
            f"no {inflight.WORKFLOW_JSON} in {run_dir / claims.CLAIMS_DIR}: only running shards "
            "(claims) are matched; run snakemake once with this version to record the workflow"
        )
    mine = run_jobs(run_dir, queue, submitter)
    jobs = tuple(
        RunJob(
            id=j.id,
            state=j.state,
            reason=j.reason,
            shards=shards,
            gpus=j.gpus,
            gpu_types=slurmstate.gpu_types(j.tres_alloc or j.tres_per_job),
            partition=j.partition,
            time_limit_minutes=j.time_limit_minutes,
            submitted=j.submit_time.isoformat() if j.submit_time else "",
            started=j.start_time.isoformat() if j.start_time and j.running else "",
            nodes=j.nodes,
        )
        for j, shards in sorted(mine.values(), key=lambda x: _int(x[0].id))
    )
    done = markers.done_shards(run_dir)
    flight = inflight.find(run_dir, submitter, done=done, queue=facts.queue)

    # pending reasons, most jobs first
    groups: dict[str, list[RunJob]] = {}
    for j in jobs:
        if j.state == "PENDING":
            groups.setdefault(j.reason or "(none)", []).append(j)
    pending = tuple(
        {
            "reason": reason,
            "jobs": [j.id for j in js],
            "shards": sum(len(j.shards) for j in js),
            **{k: v for k, v in asdict(pendingreasons.explain(reason)).items() if k != "reason"},
        }
        for reason, js in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    )

    # submit slots
    limits = facts.limits.value if facts.limits.ok else None
    accounts = Counter(j.account for j, _ in mine.values())
    qoses = Counter(j.qos for j, _ in mine.values())
    account = accounts.most_common(1)[0][0] if accounts else None
    if account is None and limits is not None:
        account = limits.default_account or None
    qos = qoses.most_common(1)[0][0] if qoses else None
    cap, source = clustercheck.submit_cap(account, qos, limits)
    if limits is None:
        source = f"unknown ({facts.limits.problem})"

    # progress
    state = coverage.load_state(run_dir)
    gpus_running = sum(j.gpus for j in jobs if j.state in {"RUNNING", "COMPLETING"})
    cov = coverage.compute(state, gpus=max(gpus_running, 1))
    finished = state.markers.finished_at[np.isfinite(state.markers.finished_at)]
    last = float(finished.max()) if finished.size else None
    hour_ago = now.timestamp() - 3600
    eta = cov.eta.seconds if cov.eta is not None and gpus_running else None
    progress = Progress(
        shards_done=cov.shards_done,
        shards_total=cov.shards_total,
        last_finished=datetime.fromtimestamp(last).isoformat(timespec="seconds") if last else None,
        seconds_since_last=round(now.timestamp() - last, 1) if last else None,
        finished_last_hour=int((finished >= hour_ago).sum()),
        gpus_running=gpus_running,
        eta_seconds=round(eta, 1) if eta is not None else None,
    )

    # nodes of the run's partitions that cannot run jobs
    parts = {p for j in jobs for p in j.partition.split(",") if p}
    bad: dict[str, dict[str, str]] = {}
    if facts.nodes.ok:
        for n in facts.nodes.value or []:
            if (not parts or n.partition in parts) and not n.usable and n.name not in bad:
                bad[n.name] = {
                    "node": n.name,
                    "state": n.state,
                    "reason": n.reason,
                    "since": n.reason_time,
                    "gres": n.gres,
                }
    else:
        notes.append(f"sinfo did not answer ({facts.nodes.problem})")

    others = None
    if facts.config.ok and "jobs" in slurmstate.private_data(facts.config.value or {}):
        notes.append(
            "other users' jobs are hidden (PrivateData=jobs): how many jobs are ahead of "
            "yours is unknown"
        )
    elif facts.others is not None and facts.others.ok:
        c = Counter(j.state for j in facts.others.value or [])
        others = {"pending": c.get("PENDING", 0), "running": c.get("RUNNING", 0)}

    main = _main_process(submitter)
    return Status(
        run_dir=str(run_dir),
        generated_at=now.isoformat(timespec="seconds"),
        user=facts.user,
        main_process=main,
        jobs=jobs,
        user_jobs=len(queue) if facts.queue.ok else None,
        submit_cap=cap,
        cap_source=source,
        pending=pending,
        probe=_probe(facts, mine, now),
        progress=progress,
        in_flight=flight,
        nodes=tuple(bad.values()),
        others=others,
        notes=tuple(notes) + flight.notes,
    )


def _main_process(submitter: inflight.Submitter | None) -> dict[str, Any]:
    if submitter is None:
        return {"host": None, "pid": None, "alive": None, "since": None}
    alive: bool | None = None
    if submitter.host == claims.hostname() and submitter.pid:
        alive = claims.process_alive(submitter.pid, None)
    return {
        "host": submitter.host,
        "pid": submitter.pid,
        "alive": alive,
        "since": inflight.local_time(submitter.started_at),
    }


def _probe(
    facts: Facts, mine: dict[str, tuple[slurmstate.Job, tuple[int, ...]]], now: datetime
) -> Probe | None:
    pending = sorted(
        (j for j, _ in mine.values() if j.pending),
        key=lambda j: (j.submit_time or datetime.max, _int(j.id)),
    )
    if not pending:
        return None
    oldest = pending[0]
    shards = len(mine[oldest.id][1]) or 1
    own = oldest.time_limit_minutes or 0
    window = _window_row(facts, oldest, own, now)
    if window is None and (facts.probe_detail is None or not facts.probe_starts):
        return None
    soon = now + timedelta(minutes=1)
    standard = set(probe_minutes(own, shards))

    def starts_now(answer: Answer[datetime]) -> bool:
        return answer.ok and answer.value is not None and answer.value <= soon

    found = [m for m, a in facts.probe_starts.items() if m not in standard and starts_now(a)]
    shown = standard | ({max(found)} if found else set())
    rows = []
    for minutes, answer in sorted(facts.probe_starts.items(), reverse=True):
        if minutes not in shown:
            continue  # a bisection step
        label = _label(minutes, own, shards)
        if answer.ok and answer.value is not None:
            rows.append(
                ProbeRow(
                    minutes, label, answer.value.isoformat(timespec="seconds"), answer.value <= soon
                )
            )
        else:
            rows.append(ProbeRow(minutes, label, None, None, answer.problem))
    if window is not None:
        rows.append(window)
        rows.sort(key=lambda r: -r.minutes)
    return Probe(
        job_id=oldest.id,
        shards=shards,
        submitted=oldest.submit_time.isoformat() if oldest.submit_time else "",
        rows=tuple(rows),
        advice=_advice(rows, own, shards, oldest.id),
    )


def _window_row(facts: Facts, job: slurmstate.Job, own: int, now: datetime) -> ProbeRow | None:
    """The longest limit that ends before the next visible maintenance window.

    ``sbatch --test-only`` places its hypothetical job behind this run's own pending
    jobs, so while they pend behind a window it can answer "after the window" even for a
    limit that would end before it. The window itself is a firmer fact: a job ending a
    minute before it starts is not held back by it. Whether it starts *now* then depends
    only on free resources: yes when a usable node of its partition is idle or mixed,
    otherwise unknown. None when no window is visible or none is ahead of a shorter limit.
    """
    if facts.reservations is None or not facts.reservations.ok:
        return None
    parts = [p for p in job.partition.split(",") if p]
    window = slurmstate.next_maintenance(facts.reservations.value or [], now, parts)
    if window is None or window.start is None or window.start <= now:
        return None
    minutes = int((window.start - now) / timedelta(minutes=1)) - 1  # a minute to schedule
    if minutes < 1 or (own and minutes >= own):
        return None
    free = facts.nodes.ok and any(
        n.usable and (not parts or n.partition in parts) and n.has_free_resources
        for n in facts.nodes.value or []
    )
    source = f"reservation {window.name} from {window.start:%Y-%m-%d %H:%M}"
    if free:
        return ProbeRow(
            minutes, WINDOW_LABEL, now.isoformat(timespec="seconds"), True, None, source
        )
    problem = "no idle node in its partition now: it starts when one frees, if before the window"
    return ProbeRow(minutes, WINDOW_LABEL, None, None, problem, source)


WINDOW_LABEL = "ends before the window"


def _label(minutes: int, own: int, shards: int) -> str:
    if minutes == own:
        return "its own request"
    if shards > 1 and minutes == math.ceil(own / shards):
        return "one shard's share"
    if own and minutes == own // 2:
        return "half of it"
    if own and minutes == own // 4:
        return "a quarter of it"
    return "longest that starts now"


def _advice(rows: list[ProbeRow], own: int, shards: int, job_id: str) -> str:
    answered = [r for r in rows if r.start is not None]
    if not answered:
        return "sbatch --test-only gave no answer; see the problems above"
    own_row = next((r for r in answered if r.minutes == own), None)
    if own_row is not None and own_row.starts_now:
        return "its own request would start now: the job waits for the next scheduling pass"
    first = min(r.start for r in answered if r.start)
    if own_row is not None and own_row.start == first:
        return (
            "no shorter walltime starts earlier: the wait is not about time (see the pending "
            "reason)"
        )
    best = max((r for r in answered if r.start == first), key=lambda r: r.minutes)
    when = "now" if best.starts_now else f"at {first.replace('T', ' ')}"
    behind = ""
    if best.label == WINDOW_LABEL and not any(
        r.starts_now for r in answered if r.source == ProbeRow.source
    ):
        behind = (
            " (sbatch --test-only found no limit that starts now: it places its test behind "
            "this run's own pending jobs, which wait for the window)"
        )
    instead = f" instead of {own_row.start.replace('T', ' ')}" if own_row and own_row.start else ""
    share = math.ceil(own / max(shards, 1))  # one shard's walltime in this job
    options = [f"walltime.max_minutes: {max(1, best.minutes // max(shards, 1))} (K={shards})"]
    k = best.minutes // max(share, 1)
    if 1 <= k < shards:
        options.append(f"--group-components classify={k} (shards keep their walltime)")
    return (
        f"a job asking for {best.minutes} min or less starts {when}{instead}{behind} (yours "
        f"asks for {own} min for {shards} shard(s)): set {' or '.join(options)}; or shorten "
        f"queued jobs in place with `scontrol update JobId={job_id} "
        f"TimeLimit={best.minutes}` (decrease only; a shard cut short resumes on its retry)"
    )


# ----------------------------------------------------------------------------- output


def to_dict(status: Status) -> dict[str, Any]:
    """The JSON document (schema: docs/schemas/cluster-status.schema.json)."""
    return {
        "format_version": 1,
        "command": "cluster status",
        "run_dir": status.run_dir,
        "generated_at": status.generated_at,
        "user": status.user,
        "main_process": status.main_process,
        "counts": {
            "running": len(status.running),
            "pending": len(status.pending_jobs),
            "gpus_in_use": sum(j.gpus for j in status.running),
        },
        "gpus_in_use": _gpu_usage(status),
        "submit_slots": {
            "run": len(status.jobs),
            "user": status.user_jobs,
            "cap": status.submit_cap,
            "cap_source": status.cap_source,
        },
        "jobs": [{**asdict(j), "shards": list(j.shards)} for j in status.jobs],
        "pending_reasons": [dict(p) for p in status.pending],
        "walltime_probe": (
            None
            if status.probe is None
            else {**asdict(status.probe), "rows": [asdict(r) for r in status.probe.rows]}
        ),
        "progress": asdict(status.progress),
        "in_flight": status.in_flight.to_dict(),
        "unavailable_nodes": [dict(n) for n in status.nodes],
        "other_users": status.others,
        "notes": list(status.notes),
    }


def _gpu_usage(status: Status) -> list[dict[str, Any]]:
    usage: Counter[tuple[str, str]] = Counter()
    for j in status.running:
        for kind, n in (j.gpu_types or {"gpu": j.gpus}).items():
            if n:
                usage[(j.partition, kind)] += n
    return [{"partition": p, "type": t, "gpus": n} for (p, t), n in sorted(usage.items())]


def _ago(seconds: float | None) -> str:
    from shardwise.throughput import format_duration

    return "never" if seconds is None else f"{format_duration(seconds)} ago"


def format_table(status: Status) -> str:
    """The plain-text view (also what --watch redraws)."""
    from shardwise.throughput import format_duration

    lines = [f"cluster status of {status.run_dir} at {status.generated_at} (user {status.user})"]
    m = status.main_process
    if m["pid"]:
        alive = {True: "running", False: "GONE", None: "on another host: cannot check"}[m["alive"]]
        extra = (
            " (run snakemake again: shards that live jobs still hold are not submitted twice)"
            if m["alive"] is False
            else ""
        )
        lines.append(
            f"main process  pid {m['pid']} on {m['host']} since {m['since']}: {alive}{extra}"
        )
    cap = (
        f"of cap {status.submit_cap:,} ({status.cap_source})"
        if status.submit_cap is not None
        else f"(submit cap: {status.cap_source})"
    )
    user_jobs = "?" if status.user_jobs is None else f"{status.user_jobs:,}"
    lines.append(
        f"jobs          {len(status.running)} running, {len(status.pending_jobs)} pending "
        f"(this run); submit slots: run {len(status.jobs)}, you {user_jobs} {cap}"
    )
    usage = _gpu_usage(status)
    gpus = sum(u["gpus"] for u in usage)
    lines.append(
        f"GPUs in use   {gpus}"
        + (
            ": " + ", ".join(f"{u['partition']} {u['type']} x{u['gpus']}" for u in usage)
            if usage
            else ""
        )
    )
    p = status.progress
    eta = (
        f"ETA {format_duration(p.eta_seconds)} at the {p.gpus_running} GPU(s) running now"
        if p.eta_seconds is not None
        else ("no ETA: no GPU of this run is running" if p.shards_done < p.shards_total else "")
    )
    lines.append(
        f"shards        {p.shards_done:,} / {p.shards_total:,} done; last finished "
        f"{_ago(p.seconds_since_last)}; {p.finished_last_hour:,} in the last hour; {eta}"
    )
    if status.others is not None:
        lines.append(
            f"other users   {status.others['pending']:,} pending, {status.others['running']:,} "
            "running in these partitions"
        )
    listed = {s for j in status.jobs for s in j.shards}
    if set(status.in_flight.shards) - listed:  # shards of local processes or unlisted jobs
        lines += ["", *status.in_flight.lines(notes=False, planning=False)]
    if status.jobs:
        pw = max(len("partition"), *(len(j.partition) for j in status.jobs))
        lines += [
            "",
            f"{'job':<9} {'state':<10} {'shards':<13} GPUs  {'limit':<7} {'partition':<{pw}}  "
            "started / pending reason",
        ]
        for j in status.jobs:
            tail = j.reason if j.state == "PENDING" else f"{j.started or j.submitted} on {j.nodes}"
            limit = f"{j.time_limit_minutes}m" if j.time_limit_minutes else "?"
            lines.append(
                f"{j.id:<9} {j.state:<10} {ranges.compress(list(j.shards)):<13} {j.gpus:>4}  "
                f"{limit:<7} {j.partition:<{pw}}  {tail}"
            )
    if status.pending:
        lines += ["", "pending, by reason"]
        for g in status.pending:
            lines.append(f"  {len(g['jobs'])} job(s), {g['shards']} shard(s): {g['reason']}")
            lines.append(f"      {g['meaning']}")
            lines.append(f"      do: {g['action']}")
    if status.probe is not None:
        pr = status.probe
        lines += [
            "",
            f"would a shorter walltime start now? (oldest pending job {pr.job_id}, "
            f"{pr.shards} shard(s), submitted {pr.submitted}; sbatch --test-only and the "
            "visible maintenance windows, nothing submitted)",
        ]
        for r in pr.rows:
            when = (
                "now"
                if r.starts_now
                else (r.start.replace("T", " ") if r.start else f"? {r.problem}")
            )
            origin = f"  [{r.source}]" if r.source != ProbeRow.source else ""
            lines.append(f"  {r.minutes:>6} min  ({r.label:<23})  expected start: {when}{origin}")
        lines.append(f"  => {pr.advice}")
    if status.nodes:
        lines += ["", "nodes that cannot run jobs (sinfo -R)"]
        for n in status.nodes:
            since = f" since {n['since']}" if n["since"] else ""
            lines.append(
                f"  {n['node']:<12} {n['state']:<10} reason: {n['reason'] or 'none given'}{since}"
            )
    if status.notes:
        lines += ["", *[f"note: {n}" for n in status.notes]]
    return "\n".join(lines)
