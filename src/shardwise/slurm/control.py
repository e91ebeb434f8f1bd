"""What shardwise itself does to the queue, outside Snakemake's submissions.

The one change to a queued SLURM job: a shorter time limit. ``scontrol update
JobId=<id> TimeLimit=<minutes>``: a user may lower the limit of their own pending job
(raising it needs an operator), and the job keeps its place in the queue, which a
cancel and resubmit would lose. Used by ``shardwise cluster retime``.

The run's jobs that preemption or a node failure ended without a requeue are put back in
the queue with :func:`requeue` (``scontrol requeue``, allowed to a job's owner when it
was submitted with ``--requeue``): the same job id, limit and request, so Snakemake keeps
waiting for it and no second job of the shard is ever submitted.

And the 1-CPU allocations of ``cluster status`` that locate a hidden maintenance window
where ``sbatch --test-only`` cannot (:func:`try_allocation`): each is given back at once
or revoked after a second (asked once more for five: a busy controller grants late);
none touches a job of the user's.

And the plan probes (:func:`submit_probe`): real jobs of the run's own request that run
``true``, submitted so that SLURM's own scheduler says when each would start; each has
a ``--deadline`` so that SLURM removes it by itself if nobody cancels it, and a
``--comment`` that names its owner (:class:`ProbeOwner`), so that a later process tells
a killed owner's leftovers from the probes of one still running.

And the launchers of ``shardwise launch`` (:func:`submit_batch`): CPU jobs that run the
workflow's main process, one at a time per run (``--dependency=singleton``).
"""

import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from shardwise.slurm import command
from shardwise.slurm.queries import Answer


def lower_time_limit(
    job_id: str, minutes: int, *, timeout: float = command.DEFAULT_TIMEOUT
) -> Answer[bool]:
    """Set the time limit of ``job_id`` to ``minutes``; True when SLURM took it."""
    argv = ["scontrol", "update", f"JobId={job_id}", f"TimeLimit={minutes}"]
    reply = command.run(argv, timeout=timeout)
    return Answer(True) if reply.ok else Answer(None, reply.problem, reply.kind)


def requeue(job_id: str, *, timeout: float = command.DEFAULT_TIMEOUT) -> Answer[bool]:
    """``scontrol requeue`` one finished or running batch job: back to PENDING under the same
    id (SLURM holds it for its credential lifetime, ``cred_expire``, 120 s by default)."""
    reply = command.run(["scontrol", "requeue", job_id], timeout=timeout)
    return Answer(True) if reply.ok else Answer(None, reply.problem, reply.kind)


class Allocation(StrEnum):
    """What ``salloc --immediate`` made of a request."""

    ALLOCATED = "allocated"  # started at once, given back when `true` ended
    NOT_NOW = "not now"  # refused: it would run into a reservation, or no room now
    OUTRANKED = "outranked"  # refused: a runnable job of higher priority pends before it


#: What salloc --immediate says when a job cannot start at once (22.05: a request that
#: would run into a maintenance reservation is refused outright, others pend a second and
#: are revoked, or are refused for "insufficient priority" while a runnable job of higher
#: priority pends in the partition); any other failure is a problem to report.
_REFUSED = re.compile(r"reservation is in use")
_REVOKED = re.compile(r"revoked|queued and waiting")
_OUTRANKED = re.compile(r"insufficient priority")
#: Seconds salloc waits for the allocation: one, then, for a request revoked after that
#: second, once more with :data:`PATIENT_SECONDS`: a controller busy with other work can
#: grant a job that fits only after its scheduling pass, seconds later, and a window
#: located from a false "not now" would be minutes early.
IMMEDIATE_SECONDS = 1
PATIENT_SECONDS = 5

#: The name of the 1-CPU allocations that locate a hidden window (``cluster status``).
PROBE_JOB_NAME = "shardwise-window-probe"


def try_allocation(
    options: Sequence[str], timeout: float = command.DEFAULT_TIMEOUT
) -> Answer[Allocation]:
    """Whether SLURM allocates a job with these ``salloc`` options at once: ``salloc
    --immediate`` runs ``true`` on this host and gives the allocation back, or its
    request is refused, or revoked after a second (then asked once more, patiently).
    Either way nothing stays queued, even when the caller is killed meanwhile (salloc
    finishes on its own)."""
    for seconds in (IMMEDIATE_SECONDS, PATIENT_SECONDS):
        argv = ["salloc", f"--immediate={seconds}", f"--job-name={PROBE_JOB_NAME}", *options]
        reply = command.run([*argv, "true"], timeout=timeout)
        if reply.ok:
            return Answer(Allocation.ALLOCATED)
        if _OUTRANKED.search(reply.stderr):
            return Answer(Allocation.OUTRANKED)
        if _REFUSED.search(reply.stderr):
            return Answer(Allocation.NOT_NOW)
        if not _REVOKED.search(reply.stderr):
            return Answer(None, reply.problem, reply.kind)
    return Answer(Allocation.NOT_NOW)


def cancel(job_ids: Sequence[str], *, timeout: float = command.DEFAULT_TIMEOUT) -> Answer[bool]:
    """``scancel`` these jobs (the user's own leftover window probes); True when it answered."""
    reply = command.run(["scancel", *job_ids], timeout=timeout)
    return Answer(True) if reply.ok else Answer(None, reply.problem, reply.kind)


#: The name of the plan probes (``cluster status`` and the workflow's walltime adaptation).
PLAN_PROBE_NAME = "shardwise-plan-probe"


@dataclass(frozen=True)
class ProbeOwner:
    """The process that submitted a plan probe, as the probe's ``--comment`` says."""

    host: str
    pid: int

    @classmethod
    def this(cls) -> "ProbeOwner":
        """This process."""
        return cls(socket.gethostname(), os.getpid())

    @classmethod
    def from_comment(cls, comment: str) -> "ProbeOwner | None":
        """The owner a probe's comment names; None for a comment of another form."""
        tag, _, rest = comment.partition(":")
        host, _, pid = rest.rpartition(":")
        if tag != "shardwise" or not host or not pid.isdigit():
            return None
        return cls(host, int(pid))

    def to_comment(self) -> str:
        """The ``--comment`` of this owner's probes."""
        return f"shardwise:{self.host}:{self.pid}"


#: What sbatch says when the user's submit cap is reached (QOS or association).
_AT_CAP = re.compile(r"MaxSubmitJob|submit.*limit|Job violates accounting/QOS policy", re.I)


def submit_probe(
    options: Sequence[str], deadline: datetime, *, timeout: float = command.DEFAULT_TIMEOUT
) -> Answer[str]:
    """Submit one plan probe (``options``: the run's request and limit): a job that runs
    ``true``, writes nothing (``-o /dev/null``), and that SLURM removes on its own once it
    can no longer end by ``deadline``. Its job id; kind ``cap`` when the submit cap
    refused it."""
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={PLAN_PROBE_NAME}",
        "--output=/dev/null",
        "--error=/dev/null",
        f"--comment={ProbeOwner.this().to_comment()}",
        f"--deadline={deadline:%Y-%m-%dT%H:%M:%S}",
        "--no-requeue",
        *options,
        "--wrap",
        "true",
    ]
    reply = command.run(argv, timeout=timeout)
    if reply.ok:
        return Answer(reply.stdout.strip().split(";")[0])
    kind = "cap" if _AT_CAP.search(reply.stderr or reply.stdout) else reply.kind
    return Answer(None, reply.problem, kind)


def submit_batch(
    options: Sequence[str], wrap: str, *, timeout: float = command.DEFAULT_TIMEOUT
) -> Answer[str]:
    """``sbatch --parsable <options> --wrap <wrap>`` (a launcher of ``shardwise launch``):
    the new job's id; kind ``cap`` when the submit cap refused it."""
    reply = command.run(["sbatch", "--parsable", *options, "--wrap", wrap], timeout=timeout)
    if reply.ok:
        return Answer(reply.stdout.strip().split(";")[0])
    kind = "cap" if _AT_CAP.search(reply.stderr or reply.stdout) else reply.kind
    return Answer(None, reply.problem, kind)
