"""``shardwise cluster check``: does this cluster fit the profile, and what to change.

:func:`check_facts` asks SLURM (a few calls, each with a timeout); :func:`findings` is
pure: one :class:`CheckResult` per check (OK / WARN / FAIL, what was found, why it
matters, the exact fix); :func:`overlay` is the site profile that fixes what it can.
"""

import functools
import math
import shutil
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from shardwise import config
from shardwise.errors import ConfigError
from shardwise.slurm import command, profile, queries
from shardwise.slurm.profile import JobRequest
from shardwise.slurm.queries import Answer
from shardwise.store.atomic import write_atomic

OK, WARN, FAIL = "OK", "WARN", "FAIL"
_RANK = {OK: 0, WARN: 1, FAIL: 2}
#: Headroom under the submit cap below which `jobs` is flagged (10%).
HEADROOM = 0.10
#: The longest gap between two status polls of the plugin (seconds).
PLUGIN_MAX_POLL_GAP = 180


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
        user=user, now=datetime.now(), config=cfg, nodes=queries.nodes(timeout=timeout),
        limits=limits, reservations=queries.reservations(timeout=timeout),
        queue=queries.jobs(user, timeout=timeout),
        sacct_installed=shutil.which("sacct") is not None,
    )  # fmt: skip
    if status_command(request, facts) == "sacct" and facts.sacct_installed and accounting:
        facts = replace(facts, sacct=queries.sacct_answers(user, timeout=min(timeout, 15.0)))
    return facts


def findings(request: JobRequest, facts: CheckFacts, max_minutes: int) -> list[CheckResult]:
    """Every check's finding, in a stable order."""
    name = (facts.config.value or {}).get("ClusterName", "?")
    controller = CheckResult(
        check="controller", status=OK, found=f"cluster {name} answers (user {facts.user})"
    )
    if not facts.config.ok:
        why = "nothing can be submitted or checked without the SLURM controller"
        fix = "run this on a login node of the cluster (where sbatch works)"
        controller = CheckResult(
            check="controller",
            status=FAIL,
            found=facts.config.problem or "no answer",
            why=why,
            fix=fix,
        )
    parts, part_findings = _partitions(request, facts, max_minutes)
    out = [controller, _account(request, facts), _jobs(request, facts),
           _status_command(request, facts), *part_findings]  # fmt: skip
    if request.constraint:
        out.append(_constraint(request, facts, parts))
    out += _excluded(request, facts)
    out += _bad_nodes(request, facts, parts)
    out.append(_reservations(request, facts, parts, max_minutes))
    return out


def overall(found: list[CheckResult]) -> str:
    """FAIL if anything fails, else WARN if anything warns, else OK."""
    return max((f.status for f in found), key=_RANK.__getitem__, default=OK)


def _account(request: JobRequest, facts: CheckFacts) -> CheckResult:
    limits = _limits(facts)
    accounts = limits.accounts if limits else ()
    default = limits.default_account if limits else ""
    hint = f"export {profile.ACCOUNT_ENV}={default or '<account>'}"
    hint += f" (yours: {', '.join(accounts)})" if accounts else ""
    cfg = facts.config.value or {}
    # unknown (no answer): as strict as a cluster that enforces associations
    required = not facts.config.ok or queries.requires_account(cfg)
    why = "without a valid account every sbatch is refused (plugin 2.8.0 guesses one when none "
    why += "is set, and --slurm-no-account does nothing)"
    if not required:
        why = "this cluster does not enforce associations (AccountingStorageEnforce: "
        why += f"{cfg.get('AccountingStorageEnforce') or 'none'}), so jobs run without one; name "
        why += "one anyway where the site bills or prioritises by account"
    level = FAIL if required else WARN
    if request.account is None:
        return CheckResult(
            check="account",
            status=level,
            found="the profile names no slurm_account",
            why=why,
            fix=hint,
        )
    unset = profile.unset_variables(request.account)
    if unset:
        return CheckResult(
            check="account", status=level, found=f"${unset[0]} is not set", why=why, fix=hint
        )
    if not facts.limits.ok:
        found = f"account {request.account}: cannot check ({facts.limits.problem})"
        return CheckResult(check="account", status=WARN, found=found, why=why, fix="")
    if request.account in accounts:
        return CheckResult(
            check="account", status=OK, found=f"account {request.account} is one of yours"
        )
    found = f"account {request.account} is not one of your associations ({', '.join(accounts)})"
    return CheckResult(check="account", status=level, found=found, why=why, fix=hint)


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


def _limits(facts: CheckFacts) -> queries.Limits | None:
    return facts.limits.value if facts.limits.ok else None


def _jobs(request: JobRequest, facts: CheckFacts) -> CheckResult:  # noqa: PLR0911 - one per case
    why = "above the cap sbatch is refused (QOSMaxSubmitJobPerUserLimit) and Snakemake fails "
    why += "the job at once, burning a retry"
    if request.jobs is None:
        return CheckResult(
            check="jobs",
            status=FAIL,
            found="the profile sets no `jobs`",
            why=why,
            fix="jobs: <under the cap>",
        )
    cap, source = submit_cap(request.account, request.qos, _limits(facts))
    mine = len(facts.queue.value or []) if facts.queue.ok else None
    queued = f"; {mine} of your jobs are queued now" if mine is not None else ""
    jobs = request.jobs
    if cap is None and source == "unknown":
        found = f"jobs {jobs}; the submit cap is unknown ({facts.limits.problem})"
        fix = "ask the admins for MaxSubmitJobsPerUser and keep jobs 10% under it"
        return CheckResult(check="jobs", status=WARN, found=found, why=why, fix=fix)
    if cap is None:
        return CheckResult(
            check="jobs", status=OK, found=f"jobs {jobs}; no submit cap is set{queued}"
        )
    good = f"jobs: {max(1, math.floor(cap * (1 - HEADROOM)))}"
    if jobs > cap:
        found = f"jobs {jobs} is above the submit cap {cap} ({source}){queued}"
        return CheckResult(check="jobs", status=FAIL, found=found, why=why, fix=good)
    if cap - jobs < HEADROOM * cap:
        found = f"jobs {jobs} leaves {cap - jobs} of the cap {cap} ({source}) for your other jobs"
        why = "less than 10% headroom: your other jobs and jobs ending between polls hit the cap"
        return CheckResult(check="jobs", status=WARN, found=found + queued, why=why, fix=good)
    if mine and mine + jobs > cap:
        found = f"jobs {jobs} + your {mine} queued jobs exceed the cap {cap} ({source})"
        fix = f"jobs: {max(1, cap - mine - math.ceil(HEADROOM * cap))} while those run"
        return CheckResult(check="jobs", status=WARN, found=found, why=why, fix=fix)
    return CheckResult(
        check="jobs", status=OK, found=f"jobs {jobs} under the submit cap {cap} ({source}){queued}"
    )


_SQUEUE = (("slurm-status-command", "squeue"),)
_SACCT = (("slurm-status-command", "sacct"),)


def _status_command(request: JobRequest, facts: CheckFacts) -> CheckResult:
    row = functools.partial(CheckResult, check="status_command")
    cfg = facts.config.value or {}
    age = queries.min_job_age_seconds(cfg) if facts.config.ok else None
    accounting = facts.config.ok and queries.accounting_enabled(cfg)
    need = max(3 * request.init_seconds, PLUGIN_MAX_POLL_GAP + 1)
    squeue_ok = age is not None and age >= 3 * request.init_seconds and age > PLUGIN_MAX_POLL_GAP
    default = "" if request.status_command else " (the plugin's default)"
    sacct = f"slurm-status-command sacct{default}"
    if status_command(request, facts) == "sacct":
        if facts.config.ok and not accounting:
            off = cfg.get("AccountingStorageType")
            found = f"{sacct}, but accounting is off ({off}): sacct would hang"
            why = "every status query fails, no job is ever seen finished, Snakemake waits forever"
            more = "" if squeue_ok else f" (and MinJobAge >= {need} s: ask the admins)"
            return row(
                status=FAIL,
                found=found,
                why=why,
                fix="slurm-status-command: squeue" + more,
                sets=_SQUEUE,
            )
        if facts.sacct is not None and not facts.sacct.ok:
            found = f"{sacct}: {facts.sacct.problem}: sacct would hang"
            why = "no job is ever seen finished and Snakemake waits forever"
            return row(
                status=FAIL, found=found, why=why, fix="slurm-status-command: squeue", sets=_SQUEUE
            )
        why = "plugin 2.8.0 reads 'CANCELLED by <uid>' from sacct as still running: a job "
        why += "cancelled by you or an admin is waited for forever"
        fix, sets = ("slurm-status-command: squeue", _SQUEUE) if squeue_ok else ("", ())
        return row(
            status=WARN if squeue_ok else OK,
            found=f"{sacct}; accounting answers",
            why=why,
            fix=fix,
            sets=sets,
        )
    if age is None:
        why = "squeue forgets finished jobs after MinJobAge; too short and they are waited for"
        found = "slurm-status-command squeue; MinJobAge unknown"
        return row(
            status=WARN, found=found, why=why, fix="check `scontrol show config | grep MinJobAge`"
        )
    if not squeue_ok:
        found = f"slurm-status-command squeue, MinJobAge {age} s < {need} s (3 x "
        found += f"slurm-init-seconds-before-status-checks {request.init_seconds}, and > "
        found += f"{PLUGIN_MAX_POLL_GAP} s)"
        why = "a job can finish and vanish from squeue between two polls and is then waited "
        why += "for forever (or the plugin quietly switches back to sacct)"
        fix, sets = f"ask the admins for MinJobAge >= {need} s", ()
        if accounting:
            fix, sets = "slurm-status-command: sacct", _SACCT
        return row(status=FAIL, found=found, why=why, fix=fix, sets=sets)
    return row(status=OK, found=f"slurm-status-command squeue; MinJobAge {age} s >= {need} s")


def _partitions(
    request: JobRequest, facts: CheckFacts, max_minutes: int
) -> tuple[dict[str, queries.Partition], list[CheckResult]]:
    if not facts.nodes.ok:
        problem = f"cannot list partitions ({facts.nodes.problem})"
        return {}, [CheckResult(check="partitions", status=WARN, found=problem)]
    parts = queries.partitions(facts.nodes.value or [])
    names, source = list(request.partitions), request.partition_source
    if not names:
        names = [p.name for p in parts.values() if p.default]
        source = "the cluster's default partition"
    gpu_parts = sorted((p for p in parts.values() if p.gpus), key=lambda p: -p.usable_gpus)
    gpu_list = ",".join(p.name for p in gpu_parts) or "(none with GPUs)"
    one = functools.partial(_partition, request=request, max_minutes=max_minutes)
    out = [one(n, parts.get(n), source, gpu_list) for n in names]
    if len(names) > 1 and any(r.status == OK for r in out):
        # sbatch -p a,b runs the job wherever it can: one bad partition is a warning
        out = [replace(r, status=WARN) if r.status == FAIL else r for r in out]
    if not names:
        found = "no partition given and the cluster has no default partition"
        fix = f"export SHARDWISE_SLURM_PARTITION={gpu_list}"
        refused = "sbatch refuses jobs without a partition"
        out.append(CheckResult(check="partition", status=FAIL, found=found, why=refused, fix=fix))
    asked = {n: parts[n] for n in names if n in parts}
    if asked and request.gpus and not sum(p.usable_gpus for p in asked.values()):
        found = "no usable GPU in the partitions right now (all GPU nodes down or drained)"
        fix = f"see `sinfo -R`; partitions with GPUs: {gpu_list}"
        out.append(
            CheckResult(
                check="gpus",
                status=WARN,
                found=found,
                why="jobs will pend until nodes return",
                fix=fix,
            )
        )
    return asked, out


def _partition(
    name: str, p: queries.Partition | None, source: str, gpu_list: str, *, request: JobRequest,
    max_minutes: int,
) -> CheckResult:  # fmt: skip
    """One partition the jobs ask for."""
    if p is None:
        found = f"partition {name} ({source}) does not exist"
        why = "sbatch refuses every job ('invalid partition specified')"
        return CheckResult(
            check="partition",
            status=FAIL,
            found=found,
            why=why,
            fix=f"partitions with GPUs here: {gpu_list}",
        )
    k = request.group_components
    limit = k * max_minutes
    problems: list[tuple[str, str, str]] = []
    if not p.up:
        problems.append(("not UP", "no job starts in it", "use another partition"))
    if request.gpus and not p.gpus:
        problems.append(("has no GPUs (gres)", "a --gpus job never starts there",
                         f"partitions with GPUs here: {gpu_list}"))  # fmt: skip
    if p.max_minutes is not None and p.max_minutes < limit:
        fit_k = p.max_minutes // max(max_minutes, 1)
        found = f"MaxTime {p.max_minutes} min < K x walltime.max_minutes = {k} x {max_minutes}"
        found += f" = {limit} min"
        fix = f"walltime.max_minutes: {max(p.max_minutes // max(k, 1), 1)}"
        fix += f", or --group-components classify={fit_k}" if fit_k >= 1 else ""
        why = "a group job asking for more pends forever (PartitionTimeLimit)"
        problems.append((found, why, fix))
    if problems:
        found, why, fix = ("; ".join(x) for x in zip(*problems, strict=True))
        return CheckResult(
            check="partition", status=FAIL, found=f"partition {name}: {found}", why=why, fix=fix
        )
    max_time = "unlimited" if p.max_minutes is None else f"{p.max_minutes} min"
    found = f"partition {name}: UP, {p.usable_gpus}/{p.gpus} GPUs usable, MaxTime "
    found += f"{max_time} >= K x walltime.max_minutes = {limit} min"
    return CheckResult(check="partition", status=OK, found=found)


def _constraint(
    request: JobRequest, facts: CheckFacts, parts: dict[str, queries.Partition]
) -> CheckResult:
    constraint = request.constraint or ""
    wanted = profile.feature_names(constraint)
    have = frozenset().union(*(p.features for p in parts.values())) if parts else frozenset()
    if not facts.nodes.ok or not parts:
        found = f"constraint {constraint}: cannot check the features"
        return CheckResult(check="constraint", status=WARN, found=found)
    missing = [f for f in wanted if f not in have]
    available = ", ".join(sorted(have)) or "(none)"
    if not missing:
        return CheckResult(
            check="constraint", status=OK, found=f"constraint {constraint}: every feature exists"
        )
    found = f"constraint {constraint}: {', '.join(missing)} exist on no node of the partitions"
    if profile.constraint_is_or(constraint) and len(missing) < len(wanted):
        why = "the other alternatives still match"
        return CheckResult(
            check="constraint", status=WARN, found=found, why=why, fix=f"features here: {available}"
        )
    why = "sbatch refuses a feature no node has ('Invalid feature specification')"
    fix = f"drop it or use one of: {available} (set-resources classify.constraint or "
    fix += "$SHARDWISE_SLURM_CONSTRAINT)"
    return CheckResult(check="constraint", status=FAIL, found=found, why=why, fix=fix)


def _excluded(request: JobRequest, facts: CheckFacts) -> list[CheckResult]:
    if not request.exclude:
        return []
    if not facts.nodes.ok:
        return [
            CheckResult(
                check="exclude", status=WARN, found="cannot list nodes to check excluded names"
            )
        ]
    known = {n.name for n in facts.nodes.value or []}
    unknown = [n for n in request.exclude if n not in known]
    if unknown:
        keep = ",".join(n for n in request.exclude if n in known)
        found = f"slurm-exclude-failed-nodes names {', '.join(unknown)}, which this cluster does"
        why = "sbatch refuses every job that excludes an unknown node ('Invalid node name "
        why += "specified'): every classify job fails at once"
        fix = f"slurm-exclude-failed-nodes: '{keep}'"
        return [
            CheckResult(check="exclude", status=FAIL, found=found + " not have", why=why, fix=fix)
        ]
    return [
        CheckResult(
            check="exclude", status=OK, found=f"excluded nodes exist: {', '.join(request.exclude)}"
        )
    ]


def _bad_nodes(
    request: JobRequest, facts: CheckFacts, parts: dict[str, queries.Partition]
) -> list[CheckResult]:
    if not facts.nodes.ok:
        return []
    seen: dict[str, queries.Node] = {}
    for n in facts.nodes.value or []:
        if n.partition in parts and not n.usable:
            seen.setdefault(n.name, n)
    out = []
    for n in seen.values():
        excluded = n.name in request.exclude
        found = f"node {n.name} is {n.state} ({n.gres or 'no gres'}), reason: "
        found += f"{n.reason or 'none given'}"
        found += f" since {n.reason_time}" if n.reason_time else ""
        found += " (excluded by the profile)" if excluded else ""
        out.append(
            CheckResult(
                check="node",
                status=OK if excluded else WARN,
                found=found,
                why=_NODE_WHY,
                fix=_NODE_FIX,
            )
        )
    return out


_NODE_WHY = "its GPUs are not available to the run"
_NODE_FIX = "nothing to do unless it stays so; the admins own it"


def _reservations(
    request: JobRequest, facts: CheckFacts, parts: dict[str, queries.Partition], max_minutes: int
) -> CheckResult:
    hidden = facts.config.ok and "reservations" in queries.private_data(facts.config.value or {})
    if not facts.reservations.ok:
        why = "maintenance then shows only as the pending reason 'ReqNodeNotAvail, Reserved "
        why += "for maintenance' (shardwise cluster status explains it)"
        found = f"cannot list reservations ({facts.reservations.problem})"
        return CheckResult(check="reservations", status=WARN, found=found, why=why)
    longest = request.group_components * max_minutes
    first = queries.next_maintenance(facts.reservations.value or [], facts.now, parts)
    hidden_note = ""
    if hidden:
        hidden_note = "; others are hidden from you (PrivateData=reservations): maintenance "
        hidden_note += "then shows only as the pending reason "
        hidden_note += "'ReqNodeNotAvail, Reserved for maintenance'"
    blind = "when the run's jobs pend with that reason, `shardwise cluster status` locates the "
    blind += "hidden window with small `sbatch --test-only` probes, or 1-CPU allocations given "
    blind += "back at once where those cannot see it, and says the longest limit that starts "
    blind += "now; `shardwise cluster retime` lowers the queued "
    blind += "jobs to it"
    if first is None:
        found = "no maintenance reservation visible" + hidden_note
        return CheckResult(
            check="reservations",
            status=WARN if hidden else OK,
            found=found,
            why=blind if hidden else "",
        )
    start = first.start or facts.now
    gap = max(0, int((start - facts.now) / timedelta(minutes=1)))
    when = f"{start:%Y-%m-%d %H:%M}" + (f" (in {gap} min)" if start > facts.now else " (now)")
    found = f"maintenance {first.name} from {when} to {first.end:%Y-%m-%d %H:%M}" + hidden_note
    if start > facts.now and gap >= longest:
        return CheckResult(check="reservations", status=OK, found=found)
    fit = max(1, gap // max(request.group_components, 1))
    why = f"a job asking for more than {gap} min pends until the window ends ('ReqNodeNotAvail, "
    why += f"Reserved for maintenance'); the longest job asks for {longest} min"
    fix = f"walltime.max_minutes: {fit} until the window (or wait for it to pass)"
    return CheckResult(check="reservations", status=WARN, found=found, why=why, fix=fix)


def overlay(
    request: JobRequest, facts: CheckFacts, found: list[CheckResult], max_minutes: int
) -> dict[str, Any]:
    """The top-level profile keys that fix what the findings can fix (nothing else)."""
    raw = request.raw
    out: dict[str, Any] = {}
    by = {f.check: f for f in found}
    cap, _ = submit_cap(request.account, request.qos, _limits(facts))
    if cap is not None and request.jobs is not None and by["jobs"].status != OK:
        out["jobs"] = max(1, math.floor(cap * (1 - HEADROOM)))
    if by["status_command"].status != OK:
        out.update(dict(by["status_command"].sets))
    failed = {f.check for f in found if f.status == FAIL}
    if "exclude" in failed:
        known = {n.name for n in facts.nodes.value or []}
        out["slurm-exclude-failed-nodes"] = ",".join(n for n in request.exclude if n in known)
    fixed: dict[str, str] = {}
    good = _good_partitions(request, facts, max_minutes) if "partition" in failed else []
    if good:
        fixed["slurm_partition"] = profile.quoted(",".join(good))
    if "constraint" in failed:
        fixed["constraint"] = profile.quoted("")  # sbatch -C '' = no constraint
    if fixed:
        set_resources = {k: dict(v or {}) for k, v in (raw.get("set-resources") or {}).items()}
        set_resources.setdefault(profile.RULE, {}).update(fixed)
        out["set-resources"] = set_resources
    limits = _limits(facts)
    default = limits.default_account if limits else ""
    if "account" in failed and default:
        defaults = dict(raw.get("default-resources") or {})
        out["default-resources"] = {**defaults, "slurm_account": profile.quoted(default)}
    return out


def _good_partitions(request: JobRequest, facts: CheckFacts, max_minutes: int) -> list[str]:
    parts = queries.partitions(facts.nodes.value or [])
    limit = request.group_components * max_minutes
    fits = (p for p in parts.values() if p.up and (p.gpus or not request.gpus))
    ok = [p for p in fits if p.max_minutes is None or p.max_minutes >= limit]
    return [p.name for p in sorted(ok, key=lambda p: (-p.usable_gpus, p.name))]


#: Which overlay key answers which check.
_OVERLAY_KEYS = {
    "jobs": "jobs", "status_command": "slurm-status-command",
    "exclude": "slurm-exclude-failed-nodes", "partition": "set-resources",
    "constraint": "set-resources", "account": "default-resources",
}  # fmt: skip


def overlay_header(profiles: list[str], found: list[CheckResult], values: dict[str, Any]) -> str:
    """The comment at the top of a written overlay: what it fixes and how to use it."""
    lines = [
        "# Site overlay written by `shardwise cluster check --write-profile`.",
        f"# It changes only what the check found wrong in: {' + '.join(profiles)}.",
        "# Use it LAST:  snakemake "
        + " ".join(f"--profile {p}" for p in profiles)
        + " --profile <this directory> ...",
        "# Snakemake merges profiles per top-level key: `set-resources` and",
        "# `default-resources` below replace the earlier mappings whole (repeated in full).",
        "#",
        "# Fixes:",
    ]
    fixed = [f for f in found if f.status != OK and _OVERLAY_KEYS.get(f.check) in values]
    lines += [f"#   {f.status} {f.check}: {f.found}" for f in fixed]
    if not fixed:
        lines.append("#   nothing: no finding here is fixed by a profile key")
    rest = [f for f in found if f.status != OK and f not in fixed]
    if rest:
        lines += ["#", "# Not fixable here (see `shardwise cluster check`):"]
        lines += [f"#   {f.status} {f.check}: {f.found}" for f in rest]
    return "\n".join(lines)


@dataclass(frozen=True, kw_only=True)
class CheckRun:
    """``shardwise cluster check``: the request, the findings, the overlay if written."""

    request: JobRequest
    found: list[CheckResult]
    profiles: list[str]
    configfile: str | None
    user: str
    max_minutes: int
    overlay_values: dict[str, Any] | None = None
    overlay_path: str | None = None

    @property
    def failed(self) -> bool:
        """The exit decision: some finding FAILs."""
        return overall(self.found) == FAIL

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (schema: docs/schemas/cluster-check.schema.json)."""
        req = asdict(self.request)
        req.pop("raw", None)
        req.update(partitions=list(self.request.partitions), exclude=list(self.request.exclude))
        return {
            "format_version": 1, "command": "cluster check", "user": self.user,
            "generated_at": datetime.now().isoformat(timespec="seconds"), "profiles": self.profiles,
            "configfile": self.configfile, "status": overall(self.found), "request": req,
            "findings": [{**asdict(f), "sets": dict(f.sets)} for f in self.found],
            "overlay": self.overlay_values, "overlay_path": self.overlay_path,
        }  # fmt: skip

    def text(self) -> str:
        """One row per finding (WARN and FAIL add why and the fix), and how to use a
        written overlay."""
        config = self.configfile or "(schema defaults)"
        head = f"shardwise cluster check: profile {' + '.join(self.profiles)}, config {config}; "
        head += f"K={self.request.group_components} x walltime.max_minutes={self.max_minutes} min"
        lines = [head, ""]
        width = max((len(f.check) for f in self.found), default=5)
        pad = " " * (width + 8)
        for f in self.found:
            lines.append(f"{f.status:<4}  {f.check:<{width}}  {f.found}")
            lines += [f"{pad}why: {f.why}"] if f.status != OK and f.why else []
            lines += [f"{pad}fix: {f.fix}"] if f.status != OK and f.fix else []
        n = {s: sum(f.status == s for f in self.found) for s in (OK, WARN, FAIL)}
        lines += ["", f"{overall(self.found)}: {n[OK]} ok, {n[WARN]} warn, {n[FAIL]} fail"]
        if self.overlay_path:
            extra = " ".join(f"--profile {p}" for p in self.profiles)
            wrote = f"wrote {self.overlay_path} ({len(self.overlay_values or {})} key(s)); use: "
            use = f"snakemake {extra} --profile {Path(self.overlay_path).parent} ..."
            lines += ["", wrote + use]
        return "\n".join(lines)


def check(
    profiles: list[str],
    configfile: str | None,
    *,
    timeout: float,
    write_profile: Path | None = None,
) -> CheckRun:
    """Check the cluster against the merged ``profiles`` and the run's config (the schema's
    defaults when None); with ``write_profile``, write the overlay that fixes what it can
    to ``<write_profile>/config.yaml``."""
    for p in profiles:
        if not Path(p).is_dir():
            msg = f"--profile {p}: no such directory (run from the workflow's directory)"
            raise ConfigError(msg)
    cfg = config.validate(config.load_yaml(Path(configfile))) if configfile else config.defaults()
    max_minutes = int(cfg["walltime"]["max_minutes"])
    request = profile.view(profile.load([Path(p) for p in profiles]), cfg)
    facts = check_facts(request, timeout=timeout)
    found = findings(request, facts, max_minutes)
    run = CheckRun(
        request=request,
        found=found,
        profiles=profiles,
        configfile=configfile,
        user=facts.user,
        max_minutes=max_minutes,
    )
    if write_profile is None:
        return run
    values = overlay(request, facts, found, max_minutes)
    text = profile.overlay_text(values, overlay_header(profiles, found, values))
    path = write_profile / "config.yaml"
    write_atomic(path, text.encode())
    return replace(run, overlay_values=values, overlay_path=str(path))
