"""``cluster check``'s preemption rows, pure: what happens to a shard job preempted here.

SLURM preempts by partition (``PreemptType=preempt/partition_prio``: a job of a
partition with a higher ``PriorityTier`` on the same nodes) or by QOS
(``preempt/qos``: a QOS whose ``Preempt`` list names the job's). The victim is requeued
(``REQUEUE``), cancelled (``CANCEL``: the job keeper requeues it), or suspended
(``SUSPEND``/``GANG``: it holds its GPU idle). ``GraceTime`` is the time between the
preemption and the kill; the profile's ``--signal=TERM@N`` must be at least that long, or
the job learns of its preemption only ``N`` seconds before the kill and holds its GPU
until then. One row per partition or QOS the jobs use; the fix goes into the overlay.
"""

from collections.abc import Sequence

from shardwise.ops.cluster.facts import OK, WARN, CheckFacts, CheckResult
from shardwise.slurm import profile, queries
from shardwise.slurm.profile import JobRequest
from shardwise.slurm.queries import Preemption

CHECK = "preemption"
#: The walltime warning the profile gives a shard job (seconds), as --signal=TERM@N.
DEFAULT_LEAD = 120


def rows(request: JobRequest, facts: CheckFacts, used: Sequence[str]) -> list[CheckResult]:
    """One row per partition in ``used`` (or per QOS), saying what a preemption does."""
    config = facts.config.value or {}
    kind = config.get("PreemptType", "preempt/none")
    if kind.endswith("/none") or not kind:
        found = "no preemption on this cluster (PreemptType=preempt/none): shard jobs run to "
        return [CheckResult(check=CHECK, status=OK, found=found + "their end")]
    if kind.endswith("/qos"):
        return [_qos_row(request, facts, config)]
    answer = facts.partition_preemption
    if answer is None or not answer.ok:
        problem = answer.problem if answer is not None else "not asked"
        found = f"cannot read the partitions' preemption ({problem})"
        return [CheckResult(check=CHECK, status=WARN, found=found)]
    parts = answer.value or {}
    nodes = facts.nodes.value or []
    return [_partition_row(request, config, nodes, parts, n) for n in used if n in parts]


def _partition_row(
    request: JobRequest,
    config: dict[str, str],
    nodes: Sequence[queries.Node],
    parts: dict[str, Preemption],
    name: str,
) -> CheckResult:
    """The row of one partition under ``preempt/partition_prio``."""
    mine = parts[name]
    above = _higher_tiers(nodes, parts, name)
    mode = mine.mode or config.get("PreemptMode", "OFF").upper()
    if not above or mode.startswith("OFF"):
        found = f"partition {name}: PreemptMode {mode}, PriorityTier {mine.priority_tier}"
        why = "no partition of a higher tier shares its nodes" if not above else "not preemptable"
        return CheckResult(check=CHECK, status=OK, found=f"{found}: never preempted ({why})")
    head = f"partition {name}: PreemptMode {mode}, PriorityTier {mine.priority_tier} "
    head += f"({', '.join(above)} above it), GraceTime {mine.grace_seconds or 0} s"
    return _verdict(request, head, mode, mine.grace_seconds or 0)


def _qos_row(request: JobRequest, facts: CheckFacts, config: dict[str, str]) -> CheckResult:
    """The row of the jobs' QOS under ``preempt/qos``."""
    answer = facts.qos_preemption
    if answer is None or not answer.ok:
        problem = answer.problem if answer is not None else "not asked"
        found = f"PreemptType=preempt/qos, but the QOS table is unknown ({problem})"
        return CheckResult(check=CHECK, status=WARN, found=found)
    table = answer.value or {}
    qos = request.qos or "normal"
    above = sorted(q.name for q in table.values() if qos in q.preempts)
    mine = table.get(qos)
    mode = (mine.mode if mine and mine.mode else config.get("PreemptMode", "OFF")).upper()
    if not above:
        found = f"QOS {qos}: no QOS may preempt it: never preempted"
        return CheckResult(check=CHECK, status=OK, found=found)
    grace = (mine.grace_seconds if mine else 0) or 0
    head = f"QOS {qos}: PreemptMode {mode} ({', '.join(above)} may preempt it), GraceTime {grace} s"
    return _verdict(request, head, mode, grace)


def _verdict(request: JobRequest, head: str, mode: str, grace: int) -> CheckResult:
    """What a preemption does to a shard job here; WARN with the overlay's fix when the
    profile forbids the requeue or warns later than the grace."""
    if mode.startswith(("SUSPEND", "GANG")):
        what = "is suspended: it holds its GPU idle until resumed, and its walltime runs on"
        fix = "ask for a partition or QOS that requeues or cancels (PreemptMode REQUEUE/CANCEL)"
        return CheckResult(check=CHECK, status=WARN, found=f"{head}: a shard job {what}", fix=fix)
    by = "SLURM" if mode.startswith("REQUEUE") else "the workflow's job keeper"
    what = f"{by} requeues a preempted shard job (the same job), which resumes from its last "
    what += "finished file"
    sets: list[tuple[str, str]] = []
    why: list[str] = []
    if request.requeue is False:
        no = request.key("no-requeue")
        why.append(f"the profile sets {no}: every preemption spends a retry instead")
        sets += [(request.key("requeue"), "true"), (no, "false")]
    lead = request.signal_lead
    if grace and (lead is None or lead < grace):
        said = f"--signal=TERM@{lead}" if lead else "no --signal"
        why.append(f"the profile's {said} is shorter than GraceTime: a preempted job learns of it "
                   f"only at the end of the grace, holding its GPU until then")  # fmt: skip
        value = f"--signal=TERM@{max(DEFAULT_LEAD, grace)}"
        sets.append(("slurm_extra", profile.quoted(value)))
    if not why:
        return CheckResult(check=CHECK, status=OK, found=f"{head}: {what}")
    fix = ", ".join(f"{k}: {v}" for k, v in sets)
    return CheckResult(
        check=CHECK,
        status=WARN,
        found=f"{head}: {what}",
        why="; ".join(why),
        fix=f"{fix} (--write-profile writes it)",
        sets=tuple(sets),
    )


def _higher_tiers(
    nodes: Sequence[queries.Node], parts: dict[str, Preemption], name: str
) -> list[str]:
    """Partitions of a higher PriorityTier sharing a node with ``name``."""
    by_part: dict[str, set[str]] = {}
    for n in nodes:
        by_part.setdefault(n.partition, set()).add(n.name)
    mine = by_part.get(name, set())
    tier = parts[name].priority_tier or 0
    return sorted(
        p.name
        for p in parts.values()
        if p.name != name and (p.priority_tier or 0) > tier and by_part.get(p.name, set()) & mine
    )
