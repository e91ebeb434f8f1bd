"""The SLURM profile as the plugin will see it: merged per top-level key and ``$VARS``
expanded, as Snakemake does (:func:`load`), and what one classify job asks sbatch for
(:func:`view`); site values may come from ``SHARDWISE_SLURM_*`` (added only when set)."""

import ast
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from shardwise.errors import ConfigError

#: Environment variables for site values, and the classify resource each becomes.
SITE_ENV = {"SHARDWISE_SLURM_PARTITION": "slurm_partition",
            "SHARDWISE_SLURM_CONSTRAINT": "constraint", "SHARDWISE_SLURM_QOS": "qos"}  # fmt: skip
ACCOUNT_ENV = "SHARDWISE_SLURM_ACCOUNT"
RULE = "classify"
#: The plugin's defaults (2.8.0) for the options the checks read.
PLUGIN_INIT_SECONDS = 40
#: shardwise's executor plugin (the SLURM plugin's executor with the job keeper attached).
SHARDWISE_EXECUTOR = "shardwise"
#: The executors whose jobs are SLURM jobs, each reading the SLURM plugin's options under
#: its own prefix (``slurm-requeue``, ``shardwise-requeue``).
SLURM_EXECUTORS = ("slurm", SHARDWISE_EXECUTOR)
_UNSET_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def site_resources(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Classify resources from ``SHARDWISE_SLURM_*`` variables that are set and non-empty."""
    env = os.environ if environ is None else environ
    return {res: env[var].strip() for var, res in SITE_ENV.items() if env.get(var, "").strip()}


def profile_file(directory: Path) -> Path:
    """The YAML Snakemake reads from a profile directory (``config.v8+.yaml`` first)."""
    for name in ("config.v8+.yaml", "config.yaml"):
        if (directory / name).is_file():
            return directory / name
    msg = f"{directory}: no config.yaml (a Snakemake profile is a directory holding config.yaml)"
    raise ConfigError(msg)


def load(directories: list[Path]) -> dict[str, Any]:
    """Merge profiles like Snakemake: later ones replace earlier ones per top-level key."""
    merged: dict[str, Any] = {}
    for directory in directories:
        path = profile_file(Path(directory))
        try:
            data = yaml.safe_load(path.read_text("utf-8")) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: cannot read the profile: {e}") from e
        if not isinstance(data, dict):
            msg = f"{path}: a profile must be a mapping of snakemake options, got {type(data)}"
            raise ConfigError(msg)
        merged.update(data)
    return merged


def executor_of(profile: Mapping[str, Any]) -> str:
    """The executor a (merged) profile selects ("" when it names none)."""
    return str(profile.get("executor") or "")


def option_prefix(profile: Mapping[str, Any]) -> str:
    """The prefix the profile's executor reads the SLURM plugin's options under: Snakemake
    names a plugin's options after the plugin (``shardwise-requeue`` with ``executor:
    shardwise``, which also reads the SLURM plugin's own ``slurm-requeue``: the
    executor plugin's ``read_slurm_spelling``)."""
    return SHARDWISE_EXECUTOR if executor_of(profile) == SHARDWISE_EXECUTOR else "slurm"


def plugin_option(profile: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """The SLURM plugin's option ``name`` (``status-command``) as the executor reads it."""
    found = profile.get(f"{option_prefix(profile)}-{name}")
    if found is None and option_prefix(profile) == SHARDWISE_EXECUTOR:
        found = profile.get(f"slurm-{name}")
    return default if found is None else found


def unread_options(profile: Mapping[str, Any]) -> list[str]:
    """The profile's SLURM plugin options its executor never reads: ``shardwise-*`` ones
    under ``executor: slurm`` (valid options of another executor, taken without a word)."""
    if executor_of(profile) != "slurm":
        return []
    return sorted(k for k in profile if k.startswith(f"{SHARDWISE_EXECUTOR}-"))


def twice_spelled(profile: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Under ``executor: shardwise``, the SLURM plugin's options given both ways with
    different values (the run refuses them at its start): name -> (slurm's, shardwise's)."""
    if executor_of(profile) != SHARDWISE_EXECUTOR:
        return {}
    prefix = f"{SHARDWISE_EXECUTOR}-"
    return {
        key.removeprefix(prefix): (profile[f"slurm-{key.removeprefix(prefix)}"], value)
        for key, value in profile.items()
        if key.startswith(prefix)
        and profile.get(f"slurm-{key.removeprefix(prefix)}", value) != value
    }


@dataclass(frozen=True)
class Spelling:
    """The SLURM plugin's options as a run under ``executor: shardwise`` was given them:
    those spelled ``slurm-<name>`` only (read with the same meaning), and those given both
    ways with different values (refused)."""

    adopted: dict[str, Any]
    conflicts: dict[str, tuple[Any, Any]]

    def line(self) -> str:
        """What the run says of the adopted ones (one line)."""
        said = ", ".join(f"slurm-{_dashed(k)}: {v}" for k, v in self.adopted.items())
        return (
            f"shardwise: read {said} with the same meaning as its shardwise-* spelling "
            f"(executor: {SHARDWISE_EXECUTOR} names the SLURM plugin's options so; the "
            "profile may say it that way)"
        )

    def refusal(self) -> str:
        """Why the run does not start (both spellings, different values)."""
        said = "; ".join(
            f"slurm-{_dashed(k)}: {a!r} and shardwise-{_dashed(k)}: {b!r}"
            for k, (a, b) in self.conflicts.items()
        )
        return (
            f"the SLURM plugin's options are given twice with different values ({said}): "
            f"with executor: {SHARDWISE_EXECUTOR} keep the shardwise-* spelling and remove "
            "the slurm-* one from the profile or the command line"
        )


def _dashed(name: str) -> str:
    return name.replace("_", "-")


def slurm_spelling(args: Any, names: Iterable[str], unset: Any) -> Spelling:
    """The SLURM plugin's options ``names`` in Snakemake's parsed arguments ``args``
    (``slurm_<name>`` and ``shardwise_<name>``; ``unset``: the value of one not given)."""
    adopted: dict[str, Any] = {}
    conflicts: dict[str, tuple[Any, Any]] = {}
    for name in names:
        theirs = getattr(args, f"slurm_{name}", unset)
        mine = getattr(args, f"{SHARDWISE_EXECUTOR}_{name}", unset)
        if theirs is unset:
            continue
        if mine is unset:
            adopted[name] = theirs
        elif mine != theirs:
            conflicts[name] = (theirs, mine)
    return Spelling(adopted, conflicts)


def expand(value: Any, environ: Mapping[str, str] | None = None) -> str:
    """``os.path.expandvars`` as Snakemake applies it (unset variables stay as written)."""
    env = os.environ if environ is None else environ
    return _UNSET_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), str(value))


def resource_value(raw: Any, environ: Mapping[str, str] | None = None) -> Any:
    """A profile resource as Snakemake evaluates it: ``"'a,b'"`` -> ``a,b``; ``4`` -> 4."""
    if raw is None or isinstance(raw, bool | int | float):
        return raw
    text = expand(raw, environ)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def unset_variables(text: str) -> list[str]:
    """Names of ``${VAR}`` left in an expanded value (the variable was not set)."""
    return _UNSET_VAR.findall(text)


@dataclass(frozen=True, kw_only=True)
class JobRequest:
    """What one classify SLURM job asks for, and where each value came from."""

    jobs: int | None
    group_components: int
    partitions: tuple[str, ...]  # empty: the cluster's default partition
    partition_source: str
    account: str | None
    constraint: str | None
    qos: str | None
    exclude: tuple[str, ...]
    gpus: int
    cpus: int | None
    mem_mb: int | None
    status_command: str | None  # None: the plugin picks (sacct when installed)
    init_seconds: int
    requeue: bool | None = None  # <prefix>-requeue / -no-requeue; None: the cluster's JobRequeue
    signal_lead: int | None = None  # seconds of sbatch --signal=TERM@N in slurm_extra
    prefix: str = "slurm"  # what the executor reads the plugin's options under (option_prefix)
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    def key(self, name: str) -> str:
        """The profile key of the plugin's option ``name`` for this executor."""
        return f"{self.prefix}-{name}"


def view(
    profile: dict[str, Any],
    config: dict[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> JobRequest:
    """What the classify rule's jobs ask for under ``profile`` (merged) and ``config``."""
    env = os.environ if environ is None else environ
    jobs = profile.get("jobs")
    k = (profile.get("group-components") or {}).get(RULE, 1)
    return JobRequest(
        jobs=int(jobs) if isinstance(jobs, int | str) and str(jobs).isdigit() else None,
        group_components=int(k),
        **{**_resources(profile, config, env), **_plugin_options(profile, env)},
        prefix=option_prefix(profile),
        raw=profile,
    )


def _resources(
    profile: dict[str, Any], config: dict[str, Any] | None, env: Mapping[str, str]
) -> dict[str, Any]:
    """The classify rule's resources: set-resources, then ``$SHARDWISE_SLURM_*``, then
    default-resources; GPUs, CPUs and memory from the config unless set-resources says."""
    defaults = profile.get("default-resources") or {}
    rule_set = (profile.get("set-resources") or {}).get(RULE) or {}
    site = site_resources(env)
    classify_cfg = ((config or {}).get("resources") or {}).get(RULE) or {}

    def pick(name: str) -> tuple[Any, str]:
        if name in rule_set:
            return resource_value(rule_set[name], env), f"set-resources {RULE}.{name}"
        if name in site:
            var = next(v for v, r in SITE_ENV.items() if r == name)
            return site[name], f"${var}"
        if name in defaults:
            return resource_value(defaults[name], env), f"default-resources {name}"
        return None, ""

    def text(name: str) -> str | None:
        value = pick(name)[0]
        return None if value in (None, "") else str(value)

    partition, source = pick("slurm_partition")
    # the rule itself sets these from config: only set-resources overrides them
    gpus, cpus, mem = (
        resource_value(rule_set[k], env) if k in rule_set else None
        for k in ("gpu", "cpus_per_task", "mem_mb")
    )
    extra = resource_value(rule_set.get("slurm_extra", defaults.get("slurm_extra")), env)
    return {
        "partitions": tuple(p.strip() for p in str(partition or "").split(",") if p.strip()),
        "partition_source": source or "the cluster's default partition",
        "account": text("slurm_account"),
        "constraint": text("constraint"),
        "qos": text("qos"),
        "gpus": int(gpus if gpus is not None else classify_cfg.get("gpu", 0) or 0),
        "cpus": int(cpus) if cpus is not None else classify_cfg.get("cpus_per_task"),
        "mem_mb": int(mem) if mem is not None else classify_cfg.get("mem_mb"),
        "signal_lead": signal_lead(str(extra or "")),
    }


def _plugin_options(profile: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The SLURM plugin's options, under the prefix the profile's executor reads."""
    exclude = expand(plugin_option(profile, "exclude-failed-nodes") or "", env)
    status = plugin_option(profile, "status-command")
    init = plugin_option(profile, "init-seconds-before-status-checks", PLUGIN_INIT_SECONDS)
    requeue = True if plugin_option(profile, "requeue") else None
    requeue = False if plugin_option(profile, "no-requeue") else requeue
    out: dict[str, Any] = {
        "exclude": tuple(n.strip() for n in exclude.split(",") if n.strip()),
        "status_command": str(status) if status else None,
        "init_seconds": int(init),
        "requeue": requeue,
    }
    if plugin_option(profile, "qos"):  # the plugin's own option wins over the resource
        out["qos"] = expand(plugin_option(profile, "qos"), env)
    return out


#: Seconds before its limit a job is told to stop when its profile does not say
#: (``profiles/slurm``: ``--signal=TERM@120``).
SIGNAL_LEAD_S = 120
#: Seconds SLURM may send that signal earlier than asked (sbatch(1): "up to 60 seconds").
SIGNAL_EARLY_S = 60

_SIGNAL = re.compile(r"--signal[= ](?:R:)?(?:B:)?(?:SIG)?(?:TERM|15)?@(\d+)")


def signal_lead(extra: str) -> int | None:
    """Seconds before the end a ``--signal=[B:]TERM@N`` in sbatch's extra options asks for
    (None: no such option; SLURM then sends no warning)."""
    found = _SIGNAL.search(extra)
    return int(found.group(1)) if found else None


def feature_names(constraint: str) -> list[str]:
    """Feature names in a constraint expression (``A100|H100``, ``[a&b]*2``, ``gpu:2``)."""
    tokens = (re.sub(r"\*\d+$", "", raw.strip()) for raw in re.split(r"[|&,\[\]()]+", constraint))
    return [token for token in tokens if token]


def constraint_is_or(constraint: str) -> bool:
    """True when any one of the features suffices (``A100|H100``)."""
    return "|" in constraint and "&" not in constraint


def overlay_text(values: dict[str, Any], header: str) -> str:
    """A profile ``config.yaml`` holding ``values`` (top-level keys) under ``header``."""
    body = yaml.safe_dump(values, sort_keys=False, default_flow_style=False)
    return header.rstrip() + "\n\n" + body


def quoted(value: str) -> str:
    """A string resource as a profile must spell it (Snakemake evaluates resources)."""
    return repr(str(value))
