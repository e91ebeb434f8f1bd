"""What a run's readers need besides run.json: ``<run_dir>/settings.json`` and the roots.

The top-level process writes :class:`RunSettings` (what is not pinned, and the roots
resolved where it ran) on every run; jobs and views read it back here. This is the one
place that turns the pinned URIs into :class:`Location`s: a relative local root is
resolved once, in the Snakemake working directory, never guessed later.
"""

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Self

from shardwise.config import CampaignSettings, InferenceSettings, Pair, Settings, StorageOptions
from shardwise.run import runjson
from shardwise.run.fields import FieldPaths
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic
from shardwise.store.location import Location

SETTINGS_JSON = "settings.json"


@dataclass(frozen=True)
class RecordedInput:
    """``settings.json``'s ``input``: the input format and where each document's fields
    live (``url_field`` None: no URL)."""

    format: str
    id_field: str
    text_field: str
    url_field: str | None = None


@dataclass(frozen=True)
class RecordedDomains:
    """``domains``: the classifier pairs each file's stats count (None in a settings.json
    written before pairs were configurable: the default pairs apply), and the tokenizer
    that counts each document's tokens (``domains.tokenizer``; run.json pins its hash)."""

    pairs: tuple[Pair, ...] | None = None
    tokenizer: str | None = None


@dataclass(frozen=True)
class RecordedRoots:
    """``roots``: the input and output roots as the planner resolved them (the absolute
    path of a local one, else its URL); None in an older settings.json."""

    input: str | None = None
    output: str | None = None


@dataclass(frozen=True)
class RecordedDolma:
    """``dolma`` (present when ``output.dolma`` is on): the attribute set and its root."""

    name: str
    root: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """``settings.json``: what jobs and views use besides run.json's pins (batch sizes may
    change between runs), with the roots resolved where the top-level process ran. Each
    field mirrors the file's key of the same name."""

    input: RecordedInput
    storage: StorageOptions
    inference: InferenceSettings = field(default_factory=InferenceSettings)
    domains: RecordedDomains = RecordedDomains()
    roots: RecordedRoots = RecordedRoots()
    dolma: RecordedDolma | None = None
    campaign: CampaignSettings = field(default_factory=CampaignSettings)

    @classmethod
    def of(cls, settings: Settings) -> Self:
        """The settings a config gives, with its roots resolved here (``open_roots``)."""
        source, output = open_roots(settings)
        inp, dolma = settings.input, settings.dolma
        return cls(
            input=RecordedInput(inp.format, inp.id_field, inp.text_field, inp.url_field),
            storage=settings.storage,
            inference=settings.inference,
            domains=RecordedDomains(
                tuple((a, b) for a, b in settings.domain_pairs), settings.count_tokenizer
            ),
            roots=RecordedRoots(resolved_uri(source), resolved_uri(output)),
            dolma=None
            if dolma is None
            else RecordedDolma(dolma.name, resolved_uri(Location(dolma.uri, settings.storage))),
            campaign=settings.campaign,
        )

    def to_json(self) -> bytes:
        """The file's bytes (absent roots, tokenizer and storage options left out)."""
        pairs = None if self.domains.pairs is None else [list(p) for p in self.domains.pairs]
        domains: dict[str, Any] = {"pairs": pairs}
        if self.domains.tokenizer:
            domains["tokenizer"] = self.domains.tokenizer
        doc = {
            "input": asdict(self.input),
            "storage": {k: v for k, v in vars(self.storage).items() if v is not None},
            "inference": asdict(self.inference),
            "domains": domains,
            "roots": {k: v for k, v in asdict(self.roots).items() if v is not None},
        }
        if self.dolma is not None:
            doc["dolma"] = asdict(self.dolma)
        if self.campaign.site is not None:
            doc["campaign"] = asdict(self.campaign)
        return json_bytes(doc)

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Parse settings.json; RecordError naming the field when it is not one."""
        f = Fields.parse(raw, where)
        domains = f.sub("domains")
        pairs = domains.list("pairs", None)
        if not all(isinstance(p, list) and len(p) == 2 for p in pairs or ()):
            raise f.refuse("domains", "pairs must be [a, b] lists")
        pairs = None if pairs is None else tuple((str(a), str(b)) for a, b in pairs)
        dolma = f.dict("dolma", None)
        return cls(
            input=f.sub("input").into(RecordedInput),
            storage=StorageOptions.from_config(f.dict("storage", {})),
            inference=f.sub("inference").into(InferenceSettings),
            domains=domains.into(RecordedDomains, pairs=pairs),
            roots=f.sub("roots").into(RecordedRoots),
            dolma=None if dolma is None else f.sub("dolma").into(RecordedDolma),
            campaign=f.sub("campaign").into(CampaignSettings),
        )

    @property
    def dolma_name(self) -> str | None:
        """The Dolma attribute set's name, when ``output.dolma`` is on."""
        return self.dolma.name if self.dolma is not None else None

    def attributes(self) -> Location | None:
        """The Dolma attributes root, when ``output.dolma`` is on."""
        root = self.dolma.root if self.dolma is not None else None
        return Location(root, self.storage) if root else None

    def with_output(self, output: Location) -> Self:
        """These settings with another output root (``shardwise relocate``)."""
        return replace(self, roots=replace(self.roots, output=resolved_uri(output)))

    def locations(self, meta: runjson.RunMeta) -> tuple[Location, Location]:
        """The input and output roots as the planner resolved them; run.json's URIs as
        written when these settings record none (older settings.json)."""
        source = Location(self.roots.input or meta.input_uri, self.storage)
        return source, Location(self.roots.output or meta.output_uri, self.storage)


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
    if settings is None or not settings.roots.output:
        return None
    return Location(settings.roots.output, settings.storage)


def output_location(run_dir: Path, meta: runjson.RunMeta) -> Location:
    """The output root of the run in ``run_dir`` (see :meth:`RunSettings.locations`)."""
    settings = read_settings(run_dir)
    if settings is None:
        return Location(meta.output_uri)
    return settings.locations(meta)[1]


def resolved_uri(loc: Location) -> str:
    """What ``settings.json`` records of a root: the absolute path of a local one."""
    return loc.uri if loc.remote else loc.root


def fields_for(settings: RunSettings, classifiers: tuple[tuple[str, str, str], ...]) -> FieldPaths:
    """The reader fields of a run: the url only when a classifier reads it (``url_text``)."""
    needs_url = any(kind == "url_text" for _name, _model, kind in classifiers)
    inp = settings.input
    return FieldPaths(inp.id_field, inp.text_field, inp.url_field if needs_url else None)


def write_settings(run_dir: Path, settings: RunSettings) -> None:
    """Record the non-pinned settings the shard jobs will use."""
    write_atomic(run_dir / SETTINGS_JSON, settings.to_json())
