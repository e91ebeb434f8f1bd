"""What a run's readers need besides run.json: ``<run_dir>/settings.json`` and the roots.

The top-level Snakemake process writes ``settings.json`` (the settings that are not
pinned: reader fields, storage options, inference, domain pairs, and the input and
output roots resolved where it ran) on every run; shard jobs, ``verify``,
``quarantine`` and the views read it back here. This is the one place that turns the
pinned URIs into :class:`Location`s: a relative local root is resolved once, in the
Snakemake working directory, never guessed from where a later command runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardwise.config import StorageOptions
from shardwise.errors import InputError
from shardwise.run import runjson
from shardwise.run.reader import Fields
from shardwise.store.atomic import json_bytes, write_atomic
from shardwise.store.location import Location

SETTINGS_JSON = "settings.json"


@dataclass(frozen=True)
class JobContext:
    """Everything a shard job needs, read from run.json and settings.json."""

    run_dir: Path
    meta: runjson.RunMeta
    settings: dict[str, Any]
    source: Location
    output: Location
    fields: Fields
    fmt: str

    @classmethod
    def load(cls, run_dir: Path) -> JobContext:
        """Read the run's pinned and current settings (no listing, no network)."""
        run_dir = Path(run_dir)
        meta = runjson.read_run_dir(run_dir)
        settings = read_settings(run_dir)
        if settings is None:
            msg = f"{run_dir / SETTINGS_JSON} is missing: start the run with snakemake"
            raise InputError(msg)
        source, output = roots(meta, settings)
        inp = settings["input"]
        return cls(
            run_dir=run_dir,
            meta=meta,
            settings=settings,
            source=source,
            output=output,
            fields=fields_for(inp, meta.classifiers),
            fmt=inp["format"],
        )


def read_settings(run_dir: Path) -> dict[str, Any] | None:
    """``settings.json``, or None before the first plan (synthetic run directories)."""
    try:
        return json.loads((Path(run_dir) / SETTINGS_JSON).read_text("utf-8"))
    except FileNotFoundError:
        return None


def roots(meta: runjson.RunMeta, settings: dict[str, Any] | None) -> tuple[Location, Location]:
    """The input and output roots of a run: as the planner resolved them, with its
    storage options; run.json's URIs as written when ``settings.json`` has none."""
    settings = settings or {}
    options = StorageOptions.from_config(settings.get("storage"))
    resolved = settings.get("roots") or {}
    return (
        Location(resolved.get("input") or meta.input_uri, options),
        Location(resolved.get("output") or meta.output_uri, options),
    )


def recorded_output(run_dir: Path) -> Location | None:
    """The output root ``settings.json`` records, without run.json (which may be damaged);
    None before the first plan of this version."""
    settings = read_settings(run_dir) or {}
    root = (settings.get("roots") or {}).get("output")
    if not root:
        return None
    return Location(root, StorageOptions.from_config(settings.get("storage")))


def output_location(run_dir: Path, meta: runjson.RunMeta) -> Location:
    """The output root of the run in ``run_dir`` (see :func:`roots`)."""
    return roots(meta, read_settings(run_dir))[1]


def resolved_uri(loc: Location) -> str:
    """What ``settings.json`` records of a root: the absolute path of a local one."""
    return loc.uri if loc.remote else loc.root


def fields_for(inp: dict[str, Any], classifiers: tuple[tuple[str, str, str], ...]) -> Fields:
    """The reader fields of a run: the url only when a classifier reads it (``url_text``)."""
    needs_url = any(kind == "url_text" for _name, _model, kind in classifiers)
    return Fields(inp["id_field"], inp["text_field"], inp["url_field"] if needs_url else None)


def write_settings(run_dir: Path, settings: dict[str, Any]) -> None:
    """Record the non-pinned settings the shard jobs will use."""
    write_atomic(run_dir / SETTINGS_JSON, json_bytes(settings))
