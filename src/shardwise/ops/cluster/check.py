"""``shardwise cluster check``: the command, and the site overlay that fixes what the
findings can (``ops/cluster/findings.py`` asks SLURM and judges each check):
:func:`overlay` is the profile keys that fix what they can, nothing else.
"""

import math
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from shardwise import config
from shardwise.errors import ConfigError
from shardwise.ops.cluster import facts as cluster_facts
from shardwise.ops.cluster.facts import (
    FAIL,
    HEADROOM,
    OK,
    WARN,
    CheckFacts,
    CheckResult,
    check_facts,
    overall,
    submit_cap,
)
from shardwise.ops.cluster.findings import findings
from shardwise.slurm import profile, queries
from shardwise.slurm.profile import JobRequest
from shardwise.store.atomic import write_atomic


def overlay(
    request: JobRequest, facts: CheckFacts, found: list[CheckResult], max_minutes: int
) -> dict[str, Any]:
    """The top-level profile keys that fix what the findings can fix (nothing else): the
    plugin's own options, the classify rule's resources, the default account."""
    failed = {f.check for f in found if f.status == FAIL}
    out = _option_fixes(request, facts, found, failed)
    fixed = _rule_fixes(request, facts, found, failed, max_minutes)
    if fixed:
        raw = request.raw.get("set-resources") or {}
        set_resources = {k: dict(v or {}) for k, v in raw.items()}
        set_resources.setdefault(profile.RULE, {}).update(fixed)
        out["set-resources"] = set_resources
    limits = cluster_facts.facts_limits(facts)
    default = limits.default_account if limits else ""
    if "account" in failed and default:
        defaults = dict(request.raw.get("default-resources") or {})
        out["default-resources"] = {**defaults, "slurm_account": profile.quoted(default)}
    return out


def _option_fixes(
    request: JobRequest, facts: CheckFacts, found: list[CheckResult], failed: set[str]
) -> dict[str, Any]:
    """Top-level keys: ``jobs`` under the cap, the status command, requeue, excluded nodes."""
    out: dict[str, Any] = {}
    by = {f.check: f for f in found}
    cap, _ = submit_cap(request.account, request.qos, cluster_facts.facts_limits(facts))
    if cap is not None and request.jobs is not None and by["jobs"].status != OK:
        out["jobs"] = max(1, math.floor(cap * (1 - HEADROOM)))
    if by["status_command"].status != OK:
        out.update(dict(by["status_command"].sets))
    sets = dict(s for f in found if f.check == "preemption" and f.status != OK for s in f.sets)
    out.update({k: v == "true" for k, v in sets.items() if k.startswith(f"{request.prefix}-")})
    if "exclude" in failed:
        known = {n.name for n in facts.nodes.value or []}
        kept = ",".join(n for n in request.exclude if n in known)
        out[request.key("exclude-failed-nodes")] = kept
    return out


def _rule_fixes(
    request: JobRequest,
    facts: CheckFacts,
    found: list[CheckResult],
    failed: set[str],
    max_minutes: int,
) -> dict[str, str]:
    """The classify rule's resources: the signal's lead (the longest grace), partitions
    that fit, no constraint the cluster lacks."""
    fixed: dict[str, str] = {}
    preempt = [f for f in found if f.check == "preemption" and f.status != OK]
    leads = [v for f in preempt for k, v in f.sets if k == "slurm_extra"]
    if leads:
        fixed["slurm_extra"] = max(leads, key=lambda v: profile.signal_lead(v) or 0)
    good = _good_partitions(request, facts, max_minutes) if "partition" in failed else []
    if good:
        fixed["slurm_partition"] = profile.quoted(",".join(good))
    if "constraint" in failed:
        fixed["constraint"] = profile.quoted("")  # sbatch -C '' = no constraint
    return fixed


def _good_partitions(request: JobRequest, facts: CheckFacts, max_minutes: int) -> list[str]:
    parts = queries.partitions(facts.nodes.value or [])
    limit = request.group_components * max_minutes
    fits = (p for p in parts.values() if p.up and (p.gpus or not request.gpus))
    ok = [p for p in fits if p.max_minutes is None or p.max_minutes >= limit]
    return [p.name for p in sorted(ok, key=lambda p: (-p.usable_gpus, p.name))]


#: Which overlay key answers which check (the SLURM plugin's options without the prefix
#: the executor reads them under: ``status-command`` is ``shardwise-status-command``).
_OVERLAY_KEYS = {
    "jobs": ("jobs",), "status_command": ("status-command",),
    "exclude": ("exclude-failed-nodes",), "partition": ("set-resources",),
    "constraint": ("set-resources",), "account": ("default-resources",),
    "preemption": ("requeue", "set-resources"),
}  # fmt: skip


def _answers(check: str, values: dict[str, Any]) -> bool:
    """Whether the overlay's ``values`` hold a key that answers ``check``."""
    names = _OVERLAY_KEYS.get(check, ())
    return any(k in names or k.partition("-")[2] in names for k in values)


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
    fixed = [f for f in found if f.status != OK and _answers(f.check, values)]
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
            "format_version": 1,
            "command": "cluster check",
            "user": self.user,
            "generated_at": datetime.now().isoformat(timespec="seconds"),
            "profiles": self.profiles,
            "configfile": self.configfile,
            "status": overall(self.found),
            "request": req,
            "findings": [{**asdict(f), "sets": dict(f.sets)} for f in self.found],
            "overlay": self.overlay_values,
            "overlay_path": self.overlay_path,
        }

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
