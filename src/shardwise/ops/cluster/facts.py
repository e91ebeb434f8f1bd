"""What ``shardwise cluster check`` judges and how it answers: SLURM's facts gathered once
(:func:`check_facts`, a few calls, each with a timeout), the account's submit cap, and
the :class:`CheckResult` row each check gives (OK / WARN / FAIL)."""

import shutil
from dataclasses import dataclass, replace
from datetime import datetime

from shardwise.slurm import command, queries
from shardwise.slurm.profile import JobRequest
from shardwise.slurm.queries import Answer

OK, WARN, FAIL = "OK", "WARN", "FAIL"


_RANK = {OK: 0, WARN: 1, FAIL: 2}


#: Headroom under the submit cap below which `jobs` is flagged (10%).
HEADROOM = 0.10


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """One row of the check."""

    check: str
    status: str
    found: str
    why: str = ""
    fix: str = ""
    #: The profile keys that make the fix, as data (what ``--write-profile`` writes).
    sets: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class CheckFacts:
    """What SLURM said, gathered once."""

    user: str
    now: datetime
    config: Answer[dict[str, str]]
    nodes: Answer[list[queries.Node]]
    limits: Answer[queries.Limits]
    reservations: Answer[list[queries.Reservation]]
    queue: Answer[list[queries.Job]]
    sacct: Answer[bool] | None = None  # sacct probed (only when it is the status command)
    sacct_installed: bool = True
    #: Each partition's PreemptMode, GraceTime and PriorityTier (None: not asked).
    partition_preemption: Answer[dict[str, queries.Preemption]] | None = None
    #: Each QOS's preemption (asked only under PreemptType=preempt/qos; needs slurmdbd).
    qos_preemption: Answer[dict[str, queries.Preemption]] | None = None


def status_command(request: JobRequest, facts: CheckFacts) -> str:
    """The status command the plugin will use (its default: sacct when installed)."""
    return request.status_command or ("sacct" if facts.sacct_installed else "squeue")


def check_facts(request: JobRequest, *, timeout: float = command.DEFAULT_TIMEOUT) -> CheckFacts:
    """Ask SLURM everything the checks read; never hangs longer than the timeouts."""
    user = queries.current_user()
    cfg = queries.config(timeout=timeout)
    accounting = cfg.ok and queries.accounting_enabled(cfg.value or {})
    if cfg.ok and not accounting:
        why = "accounting is off (AccountingStorageType=accounting_storage/none): sacctmgr has "
        limits: Answer[queries.Limits] = Answer(None, why + "nothing to say", "failed")
    else:
        limits = queries.limits(user, timeout=timeout)
    facts = CheckFacts(
        user=user,
        now=datetime.now(),
        config=cfg,
        nodes=queries.nodes(timeout=timeout),
        limits=limits,
        reservations=queries.reservations(timeout=timeout),
        queue=queries.jobs(user, timeout=timeout),
        sacct_installed=shutil.which("sacct") is not None,
        partition_preemption=queries.partition_preemption(timeout=timeout),
    )
    if (cfg.value or {}).get("PreemptType", "").endswith("/qos") and accounting:
        facts = replace(facts, qos_preemption=queries.qos_preemption(timeout=timeout))
    if status_command(request, facts) == "sacct" and facts.sacct_installed and accounting:
        facts = replace(facts, sacct=queries.sacct_answers(user, timeout=min(timeout, 15.0)))
    return facts


def overall(found: list[CheckResult]) -> str:
    """FAIL if anything fails, else WARN if anything warns, else OK."""
    return max((f.status for f in found), key=_RANK.__getitem__, default=OK)


def effective_qos(
    qos: str | None, account: str | None, limits: queries.Limits | None
) -> str | None:
    """The QOS jobs run under: the one asked for, else the association's default."""
    if qos:
        return qos
    if limits is None:
        return None
    for a in limits.associations:
        if a.account == account or not account:
            if a.default_qos:
                return a.default_qos
            if len(a.qos) == 1:
                return a.qos[0]
            if "normal" in a.qos:
                return "normal"
    return None


def submit_cap(
    account: str | None, qos: str | None, limits: queries.Limits | None
) -> tuple[int | None, str]:
    """The user's effective submit cap and where it comes from (None: none set or unknown)."""
    if limits is None:
        return None, "unknown"
    caps: list[tuple[int, str]] = []
    used = effective_qos(qos, account, limits)
    if used and used in limits.qos and limits.qos[used].max_submit_per_user is not None:
        caps.append((limits.qos[used].max_submit_per_user, f"QOS {used} MaxSubmitJobsPerUser"))
    for a in limits.associations:
        if a.account == account and a.max_submit_jobs is not None:
            where = f"association {a.account}" + (f"/{a.partition}" if a.partition else "")
            caps.append((a.max_submit_jobs, f"{where} MaxSubmitJobs"))
    if not caps:
        return None, "none set"
    return min(caps)


def facts_limits(facts: CheckFacts) -> queries.Limits | None:
    return facts.limits.value if facts.limits.ok else None
