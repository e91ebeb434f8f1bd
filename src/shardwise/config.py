"""Configuration: safe YAML, JSON Schema validation with defaults, typed views.

The schema (``config/schema.yaml``) is the single description of every key; the
Snakefile validates with ``snakemake.utils.validate`` and this module validates the
same schema for the CLI, fills defaults, and adds the checks a schema cannot state
(unique classifier names, bools refused as integers).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from shardwise.errors import ConfigError
from shardwise.sharding import check_shard_params
from shardwise.storage import StorageOptions, reject_secret_keys


@cache
def schema() -> dict[str, Any]:
    """The config JSON Schema shipped with the package (same file as config/schema.yaml)."""
    text = resources.files("shardwise").joinpath("data/config.schema.yaml").read_text("utf-8")
    return yaml.safe_load(text)


def load_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML config with the safe loader (no arbitrary objects)."""
    try:
        data = yaml.safe_load(path.read_text("utf-8"))
    except FileNotFoundError as e:
        msg = f"config file {path} does not exist"
        raise ConfigError(msg) from e
    except yaml.YAMLError as e:
        msg = f"config file {path} is not valid YAML: {e}"
        raise ConfigError(msg) from e
    if not isinstance(data, dict):
        msg = f"config file {path} must hold a mapping, got {type(data).__name__}"
        raise ConfigError(msg)
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


def validate(cfg: dict[str, Any]) -> dict[str, Any]:
    """Return a validated copy of ``cfg`` with defaults filled in, or raise ConfigError."""
    import jsonschema

    reject_secret_keys(cfg.get("storage"))  # before the schema: its errors echo values
    cfg = copy.deepcopy(cfg)
    _fill_defaults(cfg, schema())
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        msg = f"config {where}: {err.message}"
        raise ConfigError(msg)
    if "{" in cfg["run_dir"] or "}" in cfg["run_dir"]:
        # The run dir is part of the classify rule's output pattern, where Snakemake
        # reads braces as wildcards: refuse here, before anything is planned or written.
        msg = f"config run_dir: {cfg['run_dir']!r} has '{{' or '}}'; use a path without braces"
        raise ConfigError(msg)
    sharding = cfg["sharding"]
    check_shard_params(sharding["total_shards"], sharding["minimum_shard_index"])
    names = [c["name"] for c in cfg["classifiers"]]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        msg = f"classifiers: names must be unique, got {dupes} more than once"
        raise ConfigError(msg)
    StorageOptions.from_config(cfg.get("storage"))
    _domain_pairs(cfg)  # refuses pairs naming unknown classifiers, before anything runs
    return cfg


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Settings:
    """A validated config as typed values (what the package passes around)."""

    run_dir: Path
    input: InputSettings
    output_uri: str
    storage: StorageOptions
    total_shards: int
    minimum_shard_index: int
    classifiers: tuple[dict[str, str], ...]
    inference: dict[str, Any]
    resources: dict[str, Any]
    walltime: dict[str, Any]
    domain_pairs: tuple[tuple[str, str], ...] = ()

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
            inference=dict(cfg["inference"]),
            resources=dict(cfg["resources"]),
            walltime=dict(cfg["walltime"]),
            domain_pairs=tuple(_domain_pairs(cfg)),
        )

    def job_settings(self) -> dict[str, Any]:
        """What a shard job needs beyond run.json; written to ``<run_dir>/settings.json``."""
        return {
            "input": {
                "format": self.input.format,
                "id_field": self.input.id_field,
                "text_field": self.input.text_field,
                "url_field": self.input.url_field,
            },
            "storage": {k: v for k, v in vars(self.storage).items() if v is not None},
            "inference": self.inference,
            "domains": {"pairs": [list(p) for p in self.domain_pairs]},
        }


def _domain_pairs(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """The classifier pairs whose joint label counts each file's stats keep."""
    from shardwise.labelcounts import resolve_pairs

    names = [c["name"] for c in cfg["classifiers"]]
    return resolve_pairs(names, cfg.get("domains", {}).get("pairs"))


def dumps(data: Any) -> bytes:
    """Stable JSON bytes for files shardwise writes (sorted keys, trailing newline)."""
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
