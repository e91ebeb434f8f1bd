"""Configuration: safe YAML, JSON Schema validation with defaults, typed views.

The schema (``config/schema.yaml``) describes every key; this module validates it for the
CLI, fills defaults, and adds what a schema cannot state (unique classifier names, bools
refused as integers, storage without secrets, the shard numbers, the classifier pairs).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from shardwise.errors import ConfigError

#: Pairs used when the config names none: (topic, format) and the no-URL variants.
DEFAULT_PAIRS = (("topic", "format"), ("topic_nourl", "format_nourl"))

Pair = tuple[str, str]

_ADDRESSING_STYLES = ("auto", "path", "virtual")

#: Config keys that look like secrets; credentials come from the environment instead.
SECRET_KEY_WORDS = ("key", "secret", "token", "password")

#: Where credentials go instead of the workflow config (used in error messages).
CREDENTIALS_HINT = (
    "credentials are never read from the workflow config or a URL; set "
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) in the environment, "
    "use an AWS profile (storage.profile, from ~/.aws/credentials), or an instance role"
)


#: What each annotation of :class:`StorageOptions` admits (a bool is never a number).
_FIELD_TYPES = {"bool": bool, "int": int, "float": int | float, "str": str,
                "str | None": str | None}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class StorageOptions:
    """Non-secret storage settings (credentials come from the environment); the keys are
    described in config/schema.yaml."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    anon: bool = False
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    max_attempts: int = 5
    backoff_base: float = 0.5
    backoff_max: float = 20.0
    addressing_style: str = "auto"
    conditional_writes: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            value, kind = getattr(self, f.name), str(f.type)
            wanted = _FIELD_TYPES.get(kind, object)
            if not isinstance(value, wanted) or (isinstance(value, bool) and kind != "bool"):
                raise ConfigError(f"storage.{f.name}: expected {kind}, got {value!r}")
        if self.max_attempts < 1:
            raise ConfigError(f"storage.max_attempts: must be >= 1, got {self.max_attempts}")
        for name in ("connect_timeout", "read_timeout", "backoff_base", "backoff_max"):
            if getattr(self, name) < 0:
                raise ConfigError(f"storage.{name}: must be >= 0, got {getattr(self, name)}")
        if self.addressing_style not in _ADDRESSING_STYLES:
            msg = f"storage.addressing_style: {self.addressing_style!r} is not one of "
            raise ConfigError(msg + f"{list(_ADDRESSING_STYLES)}")
        if self.endpoint_url is not None:
            reject_credentials_in_url(self.endpoint_url, "storage.endpoint_url")

    @classmethod
    def from_config(cls, cfg: dict[str, Any] | None) -> StorageOptions:
        """Build from the config's ``storage`` mapping, refusing anything secret-looking."""
        cfg = dict(cfg or {})
        reject_secret_keys(cfg)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ConfigError(f"storage: unknown key(s) {unknown}; known: {sorted(known)}")
        return cls(**cfg)


def reject_secret_keys(cfg: Mapping[str, Any] | None, where: str = "storage") -> None:
    """Refuse a ``storage`` mapping with a secret-looking key, naming the key only; call
    it before the schema, whose errors echo the mapping, values included, into the logs."""
    for path in _secret_looking_keys(dict(cfg or {}), where):
        raise ConfigError(f"{path}: {CREDENTIALS_HINT}")


def _secret_looking_keys(value: Any, where: str) -> Iterator[str]:
    """Dotted paths of mapping keys (at any depth) that name a secret."""
    if isinstance(value, dict):
        for key, sub in value.items():
            path = f"{where}.{key}"
            if any(word in str(key).lower() for word in SECRET_KEY_WORDS):
                yield path
            yield from _secret_looking_keys(sub, path)
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _secret_looking_keys(sub, f"{where}[{i}]")


def reject_credentials_in_url(url: str, where: str) -> None:
    """Refuse ``scheme://user:pass@host`` URLs: they would end up in run.json and logs."""
    if "://" not in url:
        return
    netloc = urlsplit(url).netloc
    if "@" in netloc:
        msg = f"{where}: the URL carries credentials (user:password@); {CREDENTIALS_HINT}"
        raise ConfigError(msg)


@cache
def schema() -> dict[str, Any]:
    """The config JSON Schema shipped with the package (same file as config/schema.yaml)."""
    text = resources.files("shardwise").joinpath("data/config.schema.yaml").read_text("utf-8")
    return yaml.safe_load(text)


def weborganizer_labels() -> dict[str, list[str]]:
    """WebOrganizer's ``topic`` and ``format`` labels in its classifiers' ``id2label`` order
    (package data: the demo models are built with them, ids are mapped by them)."""
    text = resources.files("shardwise").joinpath("data/weborganizer-labels.json").read_text("utf-8")
    data = json.loads(text)
    return {kind: list(data[kind]) for kind in ("topic", "format")}


def load_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML config with the safe loader (no arbitrary objects)."""
    try:
        data = yaml.safe_load(path.read_text("utf-8"))
    except FileNotFoundError as e:
        raise ConfigError(f"config file {path} does not exist") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping, got {type(data).__name__}")
    return data


def _fill_defaults(value: Any, sch: dict[str, Any]) -> None:
    """Set missing properties that have a ``default``, recursively (in place)."""
    if not isinstance(value, dict):
        if isinstance(value, list) and isinstance(sch.get("items"), dict):
            for item in value:
                _fill_defaults(item, sch["items"])
        return
    for key, sub in sch.get("properties", {}).items():
        if key not in value and "default" in sub:
            value[key] = copy.deepcopy(sub["default"])
        if key in value:
            _fill_defaults(value[key], sub)


#: The switch of a block whose other settings do nothing while it is off (``output.dolma``).
SWITCH = "enabled"


def inert_settings(cfg: dict[str, Any]) -> tuple[str, ...]:
    """One line per block of ``cfg`` that sets something while its switch (a boolean
    ``enabled`` in the schema) is off: those settings change nothing, which a user who
    forgot the switch would not otherwise learn (defaults filled in or not)."""
    return tuple(_inert(cfg, schema(), ""))


def _inert(value: Any, sch: dict[str, Any], where: str) -> list[str]:
    if not isinstance(value, dict):
        return []
    props = sch.get("properties", {})
    said = []
    switch = props.get(SWITCH, {})
    if switch.get("type") == "boolean" and not value.get(SWITCH, switch.get("default")):
        missing = object()
        keys = [
            k
            for k, v in value.items()
            if k != SWITCH and v != props.get(k, {}).get("default", missing)
        ]
        if keys:
            named = ", ".join(f"{where}.{k}" for k in keys)
            it = ("they change", "them") if len(keys) > 1 else ("it changes", "it")
            text = f"config {named} set, but {where}.{SWITCH} is false: {it[0]} nothing; "
            said.append(text + f"set {where}.{SWITCH}: true to use {it[1]}, or remove {it[1]}")
    for key, sub in props.items():
        said += _inert(value.get(key), sub, f"{where}.{key}" if where else key)
    return said


def defaults() -> dict[str, Any]:
    """The schema's defaults (a config with no keys of its own; not a valid run config)."""
    cfg: dict[str, Any] = {}
    _fill_defaults(cfg, schema())
    return cfg


def validate(cfg: dict[str, Any]) -> dict[str, Any]:
    """Return a validated copy of ``cfg`` with defaults filled in, or raise ConfigError."""
    import jsonschema  # noqa: PLC0415 - ~0.07 s, validating commands only

    reject_secret_keys(cfg.get("storage"))  # before the schema: its errors echo values
    cfg = copy.deepcopy(cfg)
    _fill_defaults(cfg, schema())
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        why = err.message
        if err.context:  # anyOf/oneOf: say what each alternative wanted
            wanted = "; or ".join(sorted({sub.message for sub in err.context}))
            why = f"{err.instance!r} is not allowed: {wanted}"
        raise ConfigError(f"config {where}: {why}")
    if "{" in cfg["run_dir"] or "}" in cfg["run_dir"]:  # wildcards in the rule's output
        msg = f"config run_dir: {cfg['run_dir']!r} has '{{' or '}}'; use a path without braces"
        raise ConfigError(msg)
    sharding = cfg["sharding"]
    check_shard_params(sharding["total_shards"], sharding["minimum_shard_index"])
    names = [c["name"] for c in cfg["classifiers"]]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"classifiers: names must be unique, got {dupes} more than once")
    StorageOptions.from_config(cfg.get("storage"))
    _domain_pairs(cfg)  # refuses pairs naming unknown classifiers, before anything runs
    _check_regex(cfg["input"]["category_regex"])
    _check_precision(cfg["inference"])
    cfg["inference"] = _spelled(cfg["inference"])
    return cfg


def _spelled(inference: dict[str, Any]) -> dict[str, Any]:
    """``inference`` with ``compile`` as a word: YAML 1.1 reads a bare on/off as a boolean."""
    value = inference.get("compile", "auto")
    if isinstance(value, bool):
        return inference | {"compile": "on" if value else "off"}
    return inference


def _check_regex(pattern: str) -> None:
    """A category regex that does not compile, named before anything is planned."""
    try:
        re.compile(pattern)
    except re.error as e:
        default = schema()["properties"]["input"]["properties"]["category_regex"]["default"]
        msg = f"config input.category_regex: {pattern!r} is not a valid regular expression "
        msg += f"({e}); fix it, or drop the key for the default {default!r} "
        raise ConfigError(msg + "(the first two path components)") from e


def _check_precision(inference: dict[str, Any]) -> None:
    """float16 on a CPU is refused (slow, and its re-check reruns every document in fp32);
    bfloat16 stays possible: AMX CPUs run it natively, and the job log says when not."""
    dtype, device = inference.get("dtype", "auto"), inference.get("device", "auto")
    if device == "cpu" and dtype == "float16":
        msg = f"config inference.dtype: {dtype!r} with inference.device 'cpu': half precision "
        msg += "is slower than float32 on a CPU, and its re-check runs every document again in "
        msg += "float32 (~10x the time); use dtype auto (float32 on the CPU) or float32"
        raise ConfigError(msg)


@dataclass(frozen=True, kw_only=True)
class InputSettings:
    """How to find and read the corpus."""

    uri: str
    glob: str
    format: str
    files_per_task: int
    id_field: str
    text_field: str
    url_field: str
    category_regex: str
    relist: bool
    skip_unsafe_names: bool
    sample_files: int = 3


@dataclass(frozen=True)
class DolmaSettings:
    """``output.dolma``: the attribute set's name and where its files go."""

    name: str
    uri: str

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> DolmaSettings | None:
        """None when off; ConfigError (with the rule) when on with no place to go."""
        dolma = cfg["output"].get("dolma") or {}
        if not dolma.get("enabled", False):
            return None
        name = dolma.get("name", "weborganizer")
        if dolma.get("uri"):
            return cls(name, dolma["uri"])
        root = str(cfg["input"]["uri"]).rstrip("/")
        parent, _, last = root.rpartition("/")
        if last != "documents":
            msg = f"config output.dolma: input.uri {cfg['input']['uri']!r} does not end in "
            msg += "/documents, so the attributes have no default place: set output.dolma.uri. "
            msg += "(dolma mix finds attributes only at <root>/attributes/<name>/<rel> beside "
            raise ConfigError(msg + "<root>/documents/<rel>.)")
        return cls(name, f"{parent}/attributes/{name}" if parent else f"attributes/{name}")


@dataclass(frozen=True, kw_only=True)
class InferenceSettings:
    """How to run the classifiers (config ``inference``; settings.json keeps it for the
    jobs); defaults are the production settings."""

    max_length: int = 8192
    dtype: str = "auto"  # auto|float32|bfloat16|float16
    batch_size: int | None = None  # fixed rows per batch (overrides the token budget)
    batch_tokens: int | None = None  # padded-token budget; None -> probe on CUDA, 16384 on CPU
    device: str = "auto"  # auto|cpu|cuda|cuda:N
    probs: bool = False  # also write <name>_probs (list<float16>)
    #: "auto": a threshold measured per job and classifier; a number pins it; 0: no re-check
    recheck_margin: float | str = "auto"
    #: auto|padded|packed: packed batches (no padding, fused projections; classify/packed.py)
    attention: str = "auto"
    #: auto|on|off: the packed forward compiled (fused elementwise work; classify/fused.py)
    compile: str = "auto"


@dataclass(frozen=True, kw_only=True)
class CampaignSettings:
    """Config ``campaign``: this site's name (None: a single site) and how long a shard's
    lease in the output bucket lasts unrenewed (``store/lease.py``)."""

    site: str | None = None
    lease_seconds: float = 600


@dataclass(frozen=True, kw_only=True)
class WalltimeSettings:
    """How a shard job's SLURM time limit is sized (config ``walltime``): input bytes at
    the run's measured rate (the configured one before any), times the safety factor and
    the attempt, clamped; and whether the running workflow adapts it to SLURM's plan."""

    default_mb_per_minute: float = 50
    safety_factor: float = 2
    min_minutes: int = 10
    max_minutes: int = 240
    adapt: bool | str = "auto"  # auto (with the SLURM executor) | true | false
    adapt_check_seconds: float = 60
    adapt_probe_seconds: float = 300


@dataclass(frozen=True, kw_only=True)
class Settings:
    """A validated config as typed values (what the package passes around)."""

    run_dir: Path
    input: InputSettings
    output_uri: str
    storage: StorageOptions
    total_shards: int
    minimum_shard_index: int
    classifiers: tuple[dict[str, str], ...]
    inference: InferenceSettings
    walltime: WalltimeSettings
    campaign: CampaignSettings = field(default_factory=CampaignSettings)
    domain_pairs: tuple[tuple[str, str], ...] = ()
    #: Shards failed for one shared reason, before any succeeded, that stop a run (0: never).
    stop_after: int = 2
    #: Seconds between two looks of the job keeper at the run's SLURM jobs.
    watch_seconds: float = 60.0
    dolma: DolmaSettings | None = None  # output.dolma, when enabled
    count_tokenizer: str | None = None  # domains.tokenizer: counts each document's tokens
    inert: tuple[str, ...] = ()  # settings their block's switch leaves off (inert_settings)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Settings:
        """Validate ``cfg`` and build the typed view."""
        cfg = validate(cfg)
        return cls(
            run_dir=Path(cfg["run_dir"]),
            input=InputSettings(**cfg["input"]),
            output_uri=cfg["output"]["uri"],
            storage=StorageOptions.from_config(cfg["storage"]),
            total_shards=cfg["sharding"]["total_shards"],
            minimum_shard_index=cfg["sharding"]["minimum_shard_index"],
            classifiers=tuple(dict(c) for c in cfg["classifiers"]),
            inference=InferenceSettings(**cfg["inference"]),
            walltime=WalltimeSettings(**cfg["walltime"]),
            campaign=CampaignSettings(**cfg["campaign"]),
            domain_pairs=tuple(_domain_pairs(cfg)),
            stop_after=cfg["failures"]["stop_after"],
            watch_seconds=float(cfg["failures"]["watch_seconds"]),
            dolma=DolmaSettings.from_config(cfg),
            count_tokenizer=cfg.get("domains", {}).get("tokenizer"),
            inert=inert_settings(cfg),
        )


def _domain_pairs(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """The classifier pairs whose joint label counts each file's stats keep."""
    names = [c["name"] for c in cfg["classifiers"]]
    return resolve_pairs(names, cfg.get("domains", {}).get("pairs"))


def check_shard_params(total_shards: object, minimum_shard_index: object) -> tuple[int, int]:
    """Validate the two numbers that define an assignment; bools and floats are refused."""
    if isinstance(total_shards, bool) or not isinstance(total_shards, int):
        raise ConfigError(f"sharding.total_shards must be an integer > 0, got {total_shards!r}")
    if total_shards <= 0:
        raise ConfigError(f"sharding.total_shards must be > 0, got {total_shards!r}")
    if isinstance(minimum_shard_index, bool) or not isinstance(minimum_shard_index, int):
        msg = f"sharding.minimum_shard_index must be an integer >= 0, got {minimum_shard_index!r}"
        raise ConfigError(msg)
    if minimum_shard_index < 0:
        raise ConfigError(f"sharding.minimum_shard_index must be >= 0, got {minimum_shard_index!r}")
    return total_shards, minimum_shard_index


def resolve_pairs(names: Sequence[str], pairs: Sequence[Sequence[str]] | None) -> list[Pair]:
    """The pairs to count: the configured ones (``[]``: none), or when None the defaults
    whose classifiers exist; a pair naming an unknown classifier, one paired with itself or
    the same pair twice is refused, naming the pair and what exists."""
    known = list(names)
    if pairs is None:
        return [p for p in DEFAULT_PAIRS if p[0] in known and p[1] in known]
    out: list[Pair] = []
    for i, pair in enumerate(pairs):
        if len(pair) != 2:
            msg = f"config domains.pairs[{i}]: a pair has two classifier names, got {pair!r}"
            raise ConfigError(msg)
        a, b = str(pair[0]), str(pair[1])
        unknown = [n for n in (a, b) if n not in known]
        if unknown:
            msg = f"config domains.pairs[{i}]: {a},{b} names unknown classifier(s) "
            raise ConfigError(msg + f"{', '.join(unknown)}; the classifiers are {', '.join(known)}")
        if a == b:
            raise ConfigError(f"config domains.pairs[{i}]: {a},{b} pairs a classifier with itself")
        if (a, b) in out:
            raise ConfigError(f"config domains.pairs[{i}]: {a},{b} is listed twice")
        out.append((a, b))
    return out
