"""``shardwise cluster status`` as text and as the JSON document: pure functions of a
:class:`~shardwise.ops.cluster.status.Status` (the SLURM calls and the run directory's
facts are ``ops/cluster/status.py``'s)."""

from collections import Counter
from dataclasses import asdict
from datetime import datetime
from typing import Any

from shardwise.ops.cluster.status import Status
from shardwise.ops.common.text import format_duration
from shardwise.ops.walltime import probe as walltime_probe
from shardwise.ops.walltime.rows import Probe
from shardwise.run import adaptation, ranges


def to_dict(status: Status) -> dict[str, Any]:
    """The JSON document (schema: docs/schemas/cluster-status.schema.json)."""
    gpus = sum(j.gpus for j in status.running)
    counts = {
        "running": len(status.running),
        "pending": len(status.pending_jobs),
        "gpus_in_use": gpus,
    }
    slots = {
        "run": len(status.jobs),
        "user": status.user_jobs,
        "cap": status.submit_cap,
        "cap_source": status.cap_source,
    }
    return {
        "format_version": 1,
        "command": "cluster status",
        "run_dir": status.run_dir,
        "generated_at": status.generated_at,
        "user": status.user,
        "main_process": status.main_process,
        "counts": counts,
        "gpus_in_use": _gpu_usage(status),
        "jobs": [{**asdict(j), "shards": list(j.shards)} for j in status.jobs],
        "submit_slots": slots,
        "pending_reasons": [dict(p) for p in status.pending],
        "walltime_probe": None if status.probe is None else asdict(status.probe),
        "progress": asdict(status.progress),
        "in_flight": status.in_flight.to_dict(),
        "unavailable_nodes": [dict(n) for n in status.nodes],
        "other_users": status.others,
        "notes": list(status.notes),
        "walltime_adaptation": None if status.adapted is None else status.adapted.to_json(),
        "job_fates": _fates(status),
    }


def _fates(status: Status) -> dict[str, Any]:
    """Preemptions (per hour since the first), node failures, held and lost jobs."""
    t = status.fates
    per_hour = t.per_hour(datetime.fromisoformat(status.generated_at))
    return {**asdict(t), "preemptions_per_hour": None if per_hour is None else round(per_hour, 2)}


def _fate_line(status: Status) -> list[str]:
    """``preempted 3 (1.5/h), 1 in the last hour; node failures 0; lost 1; held 0``."""
    t = status.fates
    if not t.any:
        return []
    per_hour = t.per_hour(datetime.fromisoformat(status.generated_at))
    rate = f" ({per_hour:.1f}/h since {t.first_at})" if per_hour is not None else ""
    text = f"preempted     {t.preemptions:,}{rate}, {t.preemptions_last_hour:,} in the last hour; "
    text += f"node failures {t.node_failures:,}; lost {t.lost:,}; held {t.held:,} "
    text += "(each requeued or retried: job-events.jsonl)"
    if t.on_hold:
        text += f"; on hold {t.on_hold:,} (by their owner or an admin: waited for)"
    return [text]


def _gpu_usage(status: Status) -> list[dict[str, Any]]:
    """GPUs held by partition, QOS and GPU type (preemptible capacity shows apart)."""
    usage: Counter[tuple[str, str, str]] = Counter()
    for j in status.running:
        for kind, n in (j.gpu_types or {"gpu": j.gpus}).items():
            if n:
                usage[(j.partition, j.qos, kind)] += n
    return [
        {"partition": p, "qos": q, "type": t, "gpus": n} for (p, q, t), n in sorted(usage.items())
    ]


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{format_duration(seconds)} ago"


def format_table(status: Status) -> str:
    """The plain-text view (also what --watch redraws)."""
    lines = [f"cluster status of {status.run_dir} at {status.generated_at} (user {status.user})"]
    lines += _head_lines(status)
    lines += _fate_line(status)
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


_GONE = "GONE (run the same snakemake command again: it adopts the run's live jobs, labels "
_GONE += "what they leave and clears the dead process's lock)"


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
    several_qos = len({u["qos"] for u in usage}) > 1  # preemptible capacity by QOS
    types = ", ".join(
        f"{u['partition']}{'/' + u['qos'] if several_qos else ''} {u['type']} x{u['gpus']}"
        for u in usage
    )
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
