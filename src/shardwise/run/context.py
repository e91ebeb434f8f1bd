"""What a run's readers need besides run.json: ``<run_dir>/settings.json`` and the locations.

The top-level Snakemake process writes ``settings.json`` (the settings that are not
pinned: reader fields, storage options, inference, domain pairs) on every run; shard
jobs, ``verify`` and ``quarantine`` read it back through :meth:`JobContext.load`, which
also opens the input and output roots with those storage options.
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
        run_loc = Location(str(run_dir))
        meta = runjson.read(run_loc)
        try:
            settings = json.loads((run_dir / SETTINGS_JSON).read_text("utf-8"))
        except FileNotFoundError as e:
            msg = f"{run_dir / SETTINGS_JSON} is missing: start the run with snakemake"
            raise InputError(msg) from e
        options = StorageOptions.from_config(settings.get("storage"))
        inp = settings["input"]
        return cls(
            run_dir=run_dir,
            meta=meta,
            settings=settings,
            source=Location(meta.input_uri, options),
            output=Location(meta.output_uri, options),
            fields=fields_for(inp, meta.classifiers),
            fmt=inp["format"],
        )


def fields_for(inp: dict[str, Any], classifiers: tuple[tuple[str, str, str], ...]) -> Fields:
    """The reader fields of a run: the url only when a classifier reads it (``url_text``)."""
    needs_url = any(kind == "url_text" for _name, _model, kind in classifiers)
    return Fields(inp["id_field"], inp["text_field"], inp["url_field"] if needs_url else None)


def write_settings(run_dir: Path, settings: dict[str, Any]) -> None:
    """Record the non-pinned settings the shard jobs will use."""
    write_atomic(run_dir / SETTINGS_JSON, json_bytes(settings))
