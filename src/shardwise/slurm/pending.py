"""Why a job pends, in one plain sentence, and what to do about it.

SLURM shows one reason per pending job: the one its last scheduling pass hit
(SchedMD, "Job Reason Codes"), so a reason describes a moment, not a verdict;
``ReqNodeNotAvail`` in particular can flicker during long backfill cycles on big
systems, so act on a reason that persists. Unknown reasons are shown verbatim.
"""

import re
from dataclasses import dataclass

SCHEDMD = "https://slurm.schedmd.com/job_reason_codes.html"


@dataclass(frozen=True)
class Explanation:
    """What a pending reason means for this run."""

    reason: str  # as SLURM printed it
    meaning: str  # one plain sentence
    action: str  # what to do
    known: bool = True
    never_starts: bool = False  # it cannot start without a change


_MAINT = (
    "The job's walltime would run into a maintenance reservation, so it cannot start "
    "before the window ends (the window may be invisible to users).",
    "Ask for less time so jobs end before the window: lower walltime.max_minutes or "
    "group-components (the walltime probe below shows which limit starts now); or wait "
    "for the window to pass.",
)

# (pattern, meaning, action, never_starts); the first match wins.
_TABLE: tuple[tuple[str, str, str, bool], ...] = (
    (
        r"^Resources$",
        "The job waits for GPUs/CPUs/memory to free up; the queue is working normally.",
        "Wait. A shorter walltime is easier to backfill (see the walltime probe).",
        False,
    ),
    (
        r"^Priority$",
        "Jobs with higher priority are ahead of this one; the queue is working normally.",
        "Wait; fair-share priority recovers as your past usage ages.",
        False,
    ),
    (r"^ReqNodeNotAvail, Reserved for maintenance", *_MAINT, False),
    (
        r"^ReqNodeNotAvail",
        "Nodes the job needs (or the only nodes it may use) are down, drained, reserved "
        "or excluded.",
        "Check `sinfo -R` and the excluded nodes (shardwise cluster check); widen the "
        "partition list. It can flicker for one backfill cycle on big systems: act if it "
        "persists.",
        False,
    ),
    (
        r"^Nodes required for job are DOWN, DRAINED or reserved|^Nodes_required_for_job",
        "The nodes the job may use are down, drained, busy until a reservation (often a "
        "maintenance window) or held for higher-priority partitions.",
        "If a maintenance window is near, a shorter walltime starts sooner (see the walltime "
        "probe); otherwise check `sinfo -R` and widen the partition list.",
        False,
    ),
    (
        r"^QOSMaxSubmitJobPerUserLimit$|^QOSMaxSubmitJobsPerUserLimit$|"
        r"^AssocMaxSubmitJobLimit$|^AssocGrpSubmitJobsLimit$",
        "The cap on jobs submitted per user (running + pending) is reached; further "
        "sbatch calls are refused.",
        "Set the profile's `jobs` below the cap (shardwise cluster check prints it), or "
        "cancel other jobs.",
        False,
    ),
    (
        r"^QOSMaxGRESPerUser$|^QOSGrpGRES$|^AssocGrpGRES$|^QOSMaxGRESPerAccount$|"
        r"^AssocMaxGRESPerJob$|^QOSMaxGRESPerJob$|^AssocGrpGRESRunMinutes$|^QOSGrpGRESRunMinutes$",
        "A GPU quota (per user, per QOS group or per account) is full: the job starts when "
        "other GPU jobs of yours or your group end.",
        "Wait, or set `jobs` to the quota so jobs do not sit pending and hold submit slots.",
        False,
    ),
    (
        r"^AssocMaxJobsLimit$|^QOSMaxJobsPerUserLimit$|^AssocGrpJobsLimit$|"
        r"^QOSGrpJobsLimit$|^QOSMaxJobsPerAccountLimit$",
        "A cap on running jobs is reached; the job starts when another of yours ends.",
        "Wait; setting `jobs` to the cap frees submit slots for other work.",
        False,
    ),
    (
        r"^PartitionTimeLimit$|^QOSMaxWallDurationPerJobLimit$|^AssocMaxWallDurationPerJobLimit$",
        "The job's walltime is above the partition's (or QOS's) MaxTime: it will never start.",
        "Lower walltime.max_minutes or group-components (K x max_minutes <= MaxTime; "
        "shardwise cluster check shows the limit), then cancel the job; Snakemake resubmits.",
        True,
    ),
    (
        r"^BadConstraints$",
        "No node has the requested features (constraint): it will never start.",
        "Fix `constraint` (cluster check lists the features that exist), then cancel the job.",
        True,
    ),
    (
        r"^JobHeldUser$",
        "The job was held by its owner (scontrol hold).",
        "Release it: scontrol release <jobid>.",
        True,
    ),
    (
        r"^JobHeldAdmin$",
        "An administrator held the job.",
        "Ask the administrators why; only they can release it.",
        True,
    ),
    (
        r"^DependencyNeverSatisfied$",
        "The job depends on a job that failed: it will never start.",
        "Cancel it; Snakemake resubmits what is still needed.",
        True,
    ),
    (
        r"^Dependency$",
        "The job waits for another job to finish (--dependency).",
        "Nothing to do while the other job runs.",
        False,
    ),
    (
        r"^BeginTime$",
        "The job was submitted with a start time in the future (--begin).",
        "Nothing to do; it becomes eligible at that time.",
        False,
    ),
    (
        r"^Reservation$",
        "The job waits for the reservation it asked for to start.",
        "Nothing to do, or drop --reservation.",
        False,
    ),
    (
        r"^PartitionDown$|^PartitionInactive$",
        "The partition is down or inactive (often for maintenance).",
        "Wait, or add another partition to the partition list.",
        False,
    ),
    (
        r"^PartitionNodeLimit$|^PartitionConfig$",
        "The job asks for more than the partition allows (nodes, GPUs or another setting).",
        "Compare the request with `sinfo` / cluster check; fix the resources and resubmit.",
        True,
    ),
    (
        r"^NodeDown$",
        "A node the job needs is down.",
        "Wait for it, or exclude it (slurm-exclude-failed-nodes).",
        False,
    ),
    (
        r"^InvalidAccount$|^InvalidQOS$|^QOSJobLimit$",
        "The account or QOS cannot run this job: it will never start.",
        "Fix slurm_account / the QOS (cluster check lists yours), then cancel the job.",
        True,
    ),
    (
        r"^(Assoc|QOS)\w*Limit\w*$",
        "A limit of your account or QOS is reached; the job starts when usage drops.",
        "See `sacctmgr show assoc user=$USER` / `sacctmgr show qos` for the limit; wait, or "
        "lower `jobs` to fit it.",
        False,
    ),
    (
        r"^launch failed requeued held$",
        "The job failed to launch, was requeued and is held.",
        "Look at the node in the job's log, then scontrol release <jobid> (or cancel it).",
        True,
    ),
)

_COMPILED = tuple((re.compile(p), m, a, n) for p, m, a, n in _TABLE)


def explain(reason: str) -> Explanation:
    """The explanation of one pending reason (verbatim when unknown)."""
    text = " ".join((reason or "").strip().strip("()").split())
    for pattern, meaning, action, never in _COMPILED:
        if pattern.search(text):
            return Explanation(text, meaning, action, True, never)
    return Explanation(
        text or "(none)",
        f"SLURM's reason, shown as it is: shardwise has no explanation for it ({SCHEDMD}).",
        "Look it up in SchedMD's 'Job Reason Codes'.",
        known=False,
    )
