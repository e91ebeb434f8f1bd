"""The checks of ``shardwise cluster check``: does this cluster fit the profile.

:func:`findings` is pure: one row per check (``ops/cluster/facts.py``'s
:class:`CheckResult`: OK / WARN / FAIL, what was found, why it matters, the exact fix and
the profile keys that make it), from the facts SLURM gave.
"""

import functools
import math
from dataclasses import replace
from datetime import timedelta

from shardwise.ops.cluster import preemption as cluster_preemption
from shardwise.ops.cluster.facts import (
    FAIL,
    HEADROOM,
    OK,
    WARN,
    CheckFacts,
    CheckResult,
    facts_limits,
    status_command,
    submit_cap,
)
from shardwise.slurm import profile, queries
from shardwise.slurm.profile import JobRequest

#: The longest gap between two status polls of the plugin (seconds).
PLUGIN_MAX_POLL_GAP = 180


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
    out = [
        controller,
        _executor(request),
        _account(request, facts),
        _jobs(request, facts),
        _status_command(request, facts),
        *part_findings,
    ]
    if request.constraint:
        out.append(_constraint(request, facts, parts))
    out += _excluded(request, facts)
    out += _bad_nodes(request, facts, parts)
    out.append(_reservations(request, facts, parts, max_minutes))
    out += cluster_preemption.rows(request, facts, list(parts))
    return out


def _executor(request: JobRequest) -> CheckResult:
    """The executor keeps the run's jobs (shardwise's), and reads every plugin option."""
    row = functools.partial(CheckResult, check="executor")
    executor = profile.executor_of(request.raw) or "none"
    twice = profile.twice_spelled(request.raw)
    if twice:
        said = "; ".join(f"slurm-{k}: {a!r}, {executor}-{k}: {b!r}" for k, (a, b) in twice.items())
        why = "the SLURM plugin's options given both ways with different values: the run "
        why += "refuses to start"
        return row(status=FAIL, found=said, why=why, fix=f"keep the {executor}-* spelling")
    unread = profile.unread_options(request.raw)
    if unread:
        found = f"executor {executor} never reads {', '.join(unread)}"
        why = "Snakemake names a plugin's options after the plugin: these are valid options of "
        why += "another executor, taken without a word and never applied"
        renamed = ", ".join(f"{request.key(k.partition('-')[2])}" for k in unread)
        return row(status=FAIL, found=found, why=why, fix=f"spell them {renamed}")
    if executor != profile.SHARDWISE_EXECUTOR:
        why = "the job keeper attaches through shardwise's executor plugin: without it a "
        why += "preempted, held or vanished job may be waited for forever"
        fix = f"executor: {profile.SHARDWISE_EXECUTOR}, with the plugin's options spelled "
        fix += f"{profile.SHARDWISE_EXECUTOR}-<option> (profiles/slurm)"
        return row(status=WARN, found=f"executor {executor}", why=why, fix=fix)
    return row(status=OK, found=f"executor {executor}: the SLURM plugin with the job keeper")


def _account(request: JobRequest, facts: CheckFacts) -> CheckResult:
    limits = facts_limits(facts)
    accounts = limits.accounts if limits else ()
    default = limits.default_account if limits else ""
    hint = f"export {profile.ACCOUNT_ENV}={default or '<account>'}"
    hint += f" (yours: {', '.join(accounts)})" if accounts else ""
    cfg = facts.config.value or {}
    # unknown (no answer): as strict as a cluster that enforces associations
    required = not facts.config.ok or queries.requires_account(cfg)
    why = "without a valid account every sbatch is refused (plugin 2.8.0 guesses one when none "
    why += f"is set, and --{request.key('no-account')} does nothing)"
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
    cap, source = submit_cap(request.account, request.qos, facts_limits(facts))
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


def _status_command(request: JobRequest, facts: CheckFacts) -> CheckResult:
    row = functools.partial(CheckResult, check="status_command")
    key = request.key("status-command")
    squeue_sets, sacct_sets = ((key, "squeue"),), ((key, "sacct"),)
    cfg = facts.config.value or {}
    age = queries.min_job_age_seconds(cfg) if facts.config.ok else None
    accounting = facts.config.ok and queries.accounting_enabled(cfg)
    need = max(3 * request.init_seconds, PLUGIN_MAX_POLL_GAP + 1)
    squeue_ok = age is not None and age >= 3 * request.init_seconds and age > PLUGIN_MAX_POLL_GAP
    default = "" if request.status_command else " (the plugin's default)"
    sacct = f"{key} sacct{default}"
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
                fix=f"{key}: squeue" + more,
                sets=squeue_sets,
            )
        if facts.sacct is not None and not facts.sacct.ok:
            found = f"{sacct}: {facts.sacct.problem}: sacct would hang"
            why = "no job is ever seen finished and Snakemake waits forever"
            return row(status=FAIL, found=found, why=why, fix=f"{key}: squeue", sets=squeue_sets)
        why = "plugin 2.8.0 reads 'CANCELLED by <uid>' from sacct as still running: a job "
        why += "cancelled by you or an admin is waited for forever"
        fix, sets = (f"{key}: squeue", squeue_sets) if squeue_ok else ("", ())
        return row(
            status=WARN if squeue_ok else OK,
            found=f"{sacct}; accounting answers",
            why=why,
            fix=fix,
            sets=sets,
        )
    if age is None:
        why = "squeue forgets finished jobs after MinJobAge; too short and they are waited for"
        found = f"{key} squeue; MinJobAge unknown"
        return row(
            status=WARN, found=found, why=why, fix="check `scontrol show config | grep MinJobAge`"
        )
    if not squeue_ok:
        found = f"{key} squeue, MinJobAge {age} s < {need} s (3 x "
        found += (
            f"{request.key('init-seconds-before-status-checks')} {request.init_seconds}, and > "
        )
        found += f"{PLUGIN_MAX_POLL_GAP} s)"
        why = "a job can finish and vanish from squeue between two polls and is then waited "
        why += "for forever (or the plugin quietly switches back to sacct)"
        fix, sets = f"ask the admins for MinJobAge >= {need} s", ()
        if accounting:
            fix, sets = f"{key}: sacct", sacct_sets
        return row(status=FAIL, found=found, why=why, fix=fix, sets=sets)
    return row(status=OK, found=f"{key} squeue; MinJobAge {age} s >= {need} s")


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
    return asked, out + _no_usable_gpu(request, asked, gpu_list)


def _no_usable_gpu(
    request: JobRequest, asked: dict[str, queries.Partition], gpu_list: str
) -> list[CheckResult]:
    """A warning when the partitions asked for have GPUs but none usable right now."""
    if not asked or not request.gpus or sum(p.usable_gpus for p in asked.values()):
        return []
    found = "no usable GPU in the partitions right now (all GPU nodes down or drained)"
    fix = f"see `sinfo -R`; partitions with GPUs: {gpu_list}"
    why = "jobs will pend until nodes return"
    return [CheckResult(check="gpus", status=WARN, found=found, why=why, fix=fix)]


def _partition(
    name: str,
    p: queries.Partition | None,
    source: str,
    gpu_list: str,
    *,
    request: JobRequest,
    max_minutes: int,
) -> CheckResult:
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
        problems.append(
            (
                "has no GPUs (gres)",
                "a --gpus job never starts there",
                f"partitions with GPUs here: {gpu_list}",
            )
        )
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
        found = f"{request.key('exclude-failed-nodes')} names {', '.join(unknown)}, which this "
        found += "cluster does"
        why = "sbatch refuses every job that excludes an unknown node ('Invalid node name "
        why += "specified'): every classify job fails at once"
        fix = f"{request.key('exclude-failed-nodes')}: '{keep}'"
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
