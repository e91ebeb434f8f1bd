"""What a run's readers need besides run.json: ``<run_dir>/settings.json`` and the roots.

The top-level process writes :class:`RunSettings` (what is not pinned, and the roots
resolved where it ran) on every run; jobs and views read it back here. This is the one
place that turns the pinned URIs into :class:`Location`s: a relative local root is
resolved once, in the Snakemake working directory, never guessed later.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from shardwise.config import Pair, Settings, StorageOptions
from shardwise.errors import InputError
from shardwise.run import runjson
from shardwise.run.reader import Fields
from shardwise.run.record import Fields as RecordFields
from shardwise.store.atomic import json_bytes, write_atomic
from shardwise.store.location import Location

SETTINGS_JSON = "settings.json"


@dataclass(frozen=True)
class RunSettings:
    """``settings.json``: what jobs and views use besides run.json's pins (batch sizes may
    change between runs), with the roots resolved where the top-level process ran."""

    format: str
    id_field: str
    text_field: str
    url_field: str | None
    storage: StorageOptions
    inference: dict[str, Any] = field(default_factory=dict)  # classify.InferenceSettings
    #: The classifier pairs each file's stats count; None in a settings.json written
    #: before pairs were configurable (the default pairs apply).
    pairs: tuple[Pair, ...] | None = None
    input_root: str | None = None  # absolute path of a local root, else its URL
    output_root: str | None = None
    #: ``output.dolma``: the attribute set's name and its root (resolved), when enabled.
    dolma_name: str | None = None
    attributes_root: str | None = None
    #: ``domains.tokenizer``: what counts each document's tokens (run.json pins its hash).
    count_tokenizer: str | None = None

    @classmethod
    def of(cls, settings: Settings) -> Self:
        """The settings a config gives, with its roots resolved here (``open_roots``)."""
        source, output = open_roots(settings)
        dolma = settings.dolma
        attributes = Location(dolma.uri, settings.storage) if dolma is not None else None
        inp = settings.input
        return cls(
            inp.format, inp.id_field, inp.text_field, inp.url_field, settings.storage,
            dict(settings.inference), tuple(tuple(p) for p in settings.domain_pairs),  # type: ignore[misc]
            resolved_uri(source), resolved_uri(output), dolma.name if dolma is not None else None,
            resolved_uri(attributes) if attributes is not None else None,
            settings.count_tokenizer,
        )  # fmt: skip

    def to_json(self) -> bytes:
        """The file's bytes."""
        inp = {"format": self.format, "id_field": self.id_field, "text_field": self.text_field,
               "url_field": self.url_field}  # fmt: skip
        pairs = None if self.pairs is None else [list(p) for p in self.pairs]
        domains = {
            "pairs": pairs,
            **({"tokenizer": self.count_tokenizer} if self.count_tokenizer else {}),
        }
        roots = {"input": self.input_root, "output": self.output_root}
        storage = {k: v for k, v in vars(self.storage).items() if v is not None}
        doc = {"input": inp, "storage": storage, "inference": self.inference, "domains": domains,
               "roots": {k: v for k, v in roots.items() if v is not None}}  # fmt: skip
        if self.dolma_name is not None:
            doc["dolma"] = {"name": self.dolma_name, "root": self.attributes_root}
        return json_bytes(doc)

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Parse settings.json; RecordError naming the field when it is not one."""
        f = RecordFields.parse(raw, where)
        inp, roots, dolma = f.sub("input"), f.sub("roots"), f.sub("dolma")
        domains = f.sub("domains")
        pairs = domains.list("pairs", None)
        if not all(isinstance(p, list) and len(p) == 2 for p in pairs or ()):
            raise f.refuse("domains", "pairs must be [a, b] lists")
        return cls(
            inp.str("format"), inp.str("id_field"), inp.str("text_field"),
            inp.str("url_field", None), StorageOptions.from_config(f.dict("storage", {})),
            f.dict("inference", {}),
            None if pairs is None else tuple((str(a), str(b)) for a, b in pairs),
            roots.str("input", None), roots.str("output", None), dolma.str("name", None),
            dolma.str("root", None), domains.str("tokenizer", None),
        )  # fmt: skip

    def attributes(self) -> Location | None:
        """The Dolma attributes root, when ``output.dolma`` is on."""
        return Location(self.attributes_root, self.storage) if self.attributes_root else None

    def with_output(self, output: Location) -> Self:
        """These settings with another output root (``shardwise relocate``)."""
        return RunSettings(**{**vars(self), "output_root": resolved_uri(output)})

    def roots(self, meta: runjson.RunMeta) -> tuple[Location, Location]:
        """The input and output roots as the planner resolved them; run.json's URIs as
        written when these settings record none (older settings.json)."""
        source = Location(self.input_root or meta.input_uri, self.storage)
        return source, Location(self.output_root or meta.output_uri, self.storage)


@dataclass(frozen=True)
class JobContext:
    """Everything a shard job needs, read from run.json and settings.json."""

    run_dir: Path
    meta: runjson.RunMeta
    settings: RunSettings
    source: Location
    output: Location
    fields: Fields
    fmt: str
    attributes: Location | None = None  # the Dolma attributes root, when enabled

    @classmethod
    def load(cls, run_dir: Path) -> Self:
        """Read the run's pinned and current settings (no listing, no network)."""
        run_dir = Path(run_dir)
        meta = runjson.read_run_dir(run_dir)
        settings = read_settings(run_dir)
        if settings is None:
            raise InputError(f"{run_dir / SETTINGS_JSON} is missing: start the run with snakemake")
        source, output = settings.roots(meta)
        fields = fields_for(settings, meta.classifiers)
        return cls(run_dir, meta, settings, source, output, fields, settings.format,
                   settings.attributes())  # fmt: skip

    def roots(self) -> dict[str, Location]:
        """The roots a file's outputs go to, by name (``outputs.OutputKind.root``)."""
        found = {"output": self.output}
        if self.attributes is not None:
            found["attributes"] = self.attributes
        return found


def open_roots(settings: Settings) -> tuple[Location, Location]:
    """The input and output roots a config names, opened once by the planner; what it
    records (``RunSettings``) is what every job and view opens afterwards."""
    storage = settings.storage
    return Location(settings.input.uri, storage), Location(settings.output_uri, storage)


def read_settings(run_dir: Path) -> RunSettings | None:
    """``settings.json``, or None before the first plan (synthetic run directories)."""
    path = Path(run_dir) / SETTINGS_JSON
    try:
        return RunSettings.from_json(path.read_bytes(), str(path))
    except FileNotFoundError:
        return None


def recorded_output(run_dir: Path) -> Location | None:
    """The output root ``settings.json`` records, without run.json (which may be damaged);
    None before the first plan of this version."""
    settings = read_settings(run_dir)
    if settings is None or not settings.output_root:
        return None
    return Location(settings.output_root, settings.storage)


def output_location(run_dir: Path, meta: runjson.RunMeta) -> Location:
    """The output root of the run in ``run_dir`` (see :meth:`RunSettings.roots`)."""
    settings = read_settings(run_dir)
    if settings is None:
        return Location(meta.output_uri)
    return settings.roots(meta)[1]


def resolved_uri(loc: Location) -> str:
    """What ``settings.json`` records of a root: the absolute path of a local one."""
    return loc.uri if loc.remote else loc.root


def fields_for(settings: RunSettings, classifiers: tuple[tuple[str, str, str], ...]) -> Fields:
    """The reader fields of a run: the url only when a classifier reads it (``url_text``)."""
    needs_url = any(kind == "url_text" for _name, _model, kind in classifiers)
    return Fields(settings.id_field, settings.text_field, settings.url_field if needs_url else None)


def write_settings(run_dir: Path, settings: RunSettings) -> None:
    """Record the non-pinned settings the shard jobs will use."""
    write_atomic(run_dir / SETTINGS_JSON, settings.to_json())
