"""Why a shard job was stopped by a signal, from SLURM's own record of the job.

SIGTERM reaches a shard job at its walltime (the profile's ``--signal=TERM@120``), when a
user or an admin cancels it, and when SLURM preempts it; the job itself cannot tell them
apart, so it asks ``scontrol show job`` once: ``PreemptTime`` set is a preemption (the job
requeues itself, :mod:`shardwise.classify.preempted`); an ``EndTime`` brought forward from
the job's scheduled end (``StartTime`` + ``TimeLimit``; seen on the test cluster: a
``scancel`` sets it to the moment of the cancel, ``JobState=COMPLETING``) is a cancel;
an ``EndTime`` at the scheduled end, within :data:`WALLTIME_WINDOW_S`, the walltime. A
walltime stop before the job's first file, at a limit the walltime fit lowered, counts
against the fit. The failure
record carries the cause and the limit: a retry doubles the walltime only after a stop at
it (``run/failures.longer_walltimes``), and the fit never again lowers the shard's jobs to
a limit that proved too short (``run/failures.fit_floor``).
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from shardwise.errors import RecordError
from shardwise.run import adaptation, failures
from shardwise.run.failures import Cause
from shardwise.slurm import command, profile, queries

#: Seconds before the limit in which a SIGTERM is the walltime's: the profile's lead
#: (120 s), SLURM's up to 60 s early signal, and slack for a slow controller.
WALLTIME_WINDOW_S = 300
#: Seconds the SLURM call may take: the job is stopping.
TIMEOUT = 10.0
#: Seconds an ``EndTime`` may fall before the scheduled end and still be the limit's.
EARLY_END_S = 90


@dataclass(frozen=True)
class Stop:
    """What stopped the job, and its time limit then (minutes; None: unknown)."""

    cause: Cause
    limit: int | None = None


def why_stopped(
    run_dir: Path,
    labelled: int,
    env: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> Stop:
    """The stop's cause (``labelled``: files this attempt finished)."""
    job_id = (env if env is not None else os.environ).get("SLURM_JOB_ID", "")
    if not job_id:
        return Stop(failures.INTERRUPTED)
    detail = queries.job_detail(job_id, timeout=TIMEOUT)
    if not detail.ok or not detail.value:
        return Stop(failures.INTERRUPTED)
    return judge(detail.value, run_dir, job_id, labelled, now or datetime.now())


def judge(
    info: Mapping[str, str], run_dir: Path, job_id: str, labelled: int, now: datetime
) -> Stop:
    """The cause from ``scontrol show job``'s fields (pure but for the fit's record)."""
    limit = command.minutes(info.get("TimeLimit"))
    state = info.get("JobState", "")
    if not command.is_null(info.get("PreemptTime")):  # requeued, by SLURM or by the job
        where = f" in partition {info['Partition']}" if info.get("Partition") else ""
        return Stop(failures.preempted(where), limit)
    end = command.timestamp(info.get("EndTime"))
    start = command.timestamp(info.get("StartTime"))
    if start is not None and end is not None and limit is not None:
        early = (start + timedelta(minutes=limit) - end).total_seconds()
        if early > EARLY_END_S:  # ended before its limit by someone: a cancel
            return Stop(failures.cancelled(state), limit)
    if state.startswith("CANCELLED"):
        return Stop(failures.cancelled(state), limit)
    if end is None or (end - now).total_seconds() > WALLTIME_WINDOW_S:
        return Stop(failures.INTERRUPTED, limit)
    if labelled == 0 and _lowered_by_fit(run_dir, job_id):
        return Stop(failures.fit_too_short(limit), limit)
    return Stop(failures.walltime_stop(limit, labelled), limit)


def _lowered_by_fit(run_dir: Path, job_id: str) -> bool:
    """Whether the walltime adaptation lowered this job's limit."""
    try:
        record = adaptation.load(run_dir)
    except RecordError:
        return False
    events = record.events if record is not None else ()
    return any(e.action == "lowered" and job_id in e.jobs for e in events)


#: Seconds before its limit a job is told to stop (the profile's ``TERM@120``) plus the
#: minute SLURM may send it early: what a wait inside the job must leave untouched.
STOP_LEAD_S = profile.SIGNAL_LEAD_S + profile.SIGNAL_EARLY_S


def seconds_left(env: Mapping[str, str] | None = None, now: datetime | None = None) -> float | None:
    """Seconds until this job is told to stop (its ``EndTime`` less :data:`STOP_LEAD_S`),
    from ``scontrol show job``; None outside SLURM or when the controller does not say."""
    job_id = (env if env is not None else os.environ).get("SLURM_JOB_ID", "")
    if not job_id:
        return None
    detail = queries.job_detail(job_id, timeout=TIMEOUT)
    end = command.timestamp(detail.value.get("EndTime")) if detail.ok and detail.value else None
    if end is None:
        return None
    return (end - (now or datetime.now())).total_seconds() - STOP_LEAD_S
