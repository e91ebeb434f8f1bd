"""The one change shardwise makes to a queued SLURM job: a shorter time limit.

``scontrol update JobId=<id> TimeLimit=<minutes>``: a user may lower the limit of their
own pending job (raising it needs an operator), and the job keeps its place in the
queue, which a cancel and resubmit would lose. Used by ``shardwise cluster retime``.
"""

from shardwise.slurm import command
from shardwise.slurm.queries import Answer


def lower_time_limit(
    job_id: str, minutes: int, *, timeout: float = command.DEFAULT_TIMEOUT
) -> Answer[bool]:
    """Set the time limit of ``job_id`` to ``minutes``; True when SLURM took it."""
    argv = ["scontrol", "update", f"JobId={job_id}", f"TimeLimit={minutes}"]
    reply = command.run(argv, timeout=timeout)
    return Answer(True) if reply.ok else Answer(None, reply.problem, reply.kind)
