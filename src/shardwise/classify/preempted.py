"""A shard job that SLURM preempts puts its own job back in the queue.

Under preemption with a ``GraceTime``, SLURM sends SIGTERM to the job's steps at once
and kills them only when the grace has run out. The shard job stops between files; left
alone, its step would then exit non-zero and the job would end ``FAILED`` before SLURM
could requeue or cancel it for preemption: Snakemake would spend a retry on it and double
its walltime. So a job stopped by SIGTERM asks SLURM whether it is being preempted
(``PreemptTime`` set) and, if it may be requeued, requeues itself (``scontrol requeue``):
the same job goes back to the queue, and its shards resume from their last finished file.
A SIGTERM at the walltime (no ``PreemptTime``) is left to Snakemake's retry.
"""

import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from shardwise.run import jobevents
from shardwise.run.jobevents import JobEvent, Kind
from shardwise.slurm import command, control, queries

#: Seconds each SLURM call may take here: the grace time is short.
TIMEOUT = 10.0


def requeue_if_preempted(
    run_dir: Path, shard: int, env: Mapping[str, str] | None = None
) -> str | None:
    """Requeue this job when SLURM is preempting it; the line to print, or None when it
    is not a preemption (or not a SLURM job)."""
    job_id = (env if env is not None else os.environ).get("SLURM_JOB_ID", "")
    if not job_id:
        return None
    detail = queries.job_detail(job_id, timeout=TIMEOUT)
    if not detail.ok or command.is_null((detail.value or {}).get("PreemptTime")):
        return None
    info = detail.value or {}
    where = f" in partition {info['Partition']}" if info.get("Partition") else ""
    if info.get("Requeue") == "0":
        return f"job {job_id} is preempted{where} and may not be requeued: Snakemake retries it"
    done = control.requeue(job_id, timeout=TIMEOUT)
    if not done.ok:
        return f"job {job_id} is preempted{where}; requeueing it failed ({done.problem})"
    text = f"job {job_id} (shard {shard}) was preempted{where}: it requeued itself, and its "
    text += "shards resume from their last finished file in the same job"
    event = JobEvent(
        at=datetime.now().isoformat(timespec="seconds"),
        job_id=job_id,
        kind=str(Kind.PREEMPTED),
        shards=(shard,),
        state=info.get("JobState", ""),
        partition=info.get("Partition", ""),
        run=command.count(info.get("Restarts")) or 0,
        action="requeued",
        text=text,
    )
    jobevents.append(run_dir, event)
    return text
