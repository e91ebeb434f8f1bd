"""A selection: which labelled documents a training mix takes, and how many times each.

``selections/<name>/``: ``selection.json`` (:class:`SelectionPlan`, each domain's rate),
``shards/<shard>.json`` (:class:`ShardSelection`, counted) and ``files/<rel>.parquet``. A
document of rate ``r`` is taken ``floor(r) + 1[h(seed, id) < frac(r)]`` times (``h`` a keyed
BLAKE2b): the same seed gives the same bytes, each file's selection its own rows alone.
"""

import hashlib
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.run import dolma
from shardwise.run.record import Fields
from shardwise.store.atomic import create_exclusive, json_bytes, write_atomic
from shardwise.store.location import Location

SELECTIONS_DIR = "selections"
PLAN_JSON = "selection.json"
#: A complete selection's ``dolma mix`` config, and where it goes when the run changes.
MIX_YAML = "mix.yaml"
STALE_MIX_YAML = "mix.yaml.stale"
FILES_DIR = "files"
SHARDS_DIR = "shards"
FORMAT_VERSION = 1
#: A selection's name: a directory name and a Dolma attribute set's name.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SCHEMA = pa.schema([("row", pa.int64()), ("id", pa.string()), ("repeats", pa.int16())])


def root(run_dir: Path, name: str) -> Path:
    """Where selection ``name`` of a run lives."""
    return Path(run_dir) / SELECTIONS_DIR / name


def names(run_dir: Path) -> list[str]:
    """The selections planned in a run (those with a ``selection.json``), sorted."""
    base = Path(run_dir) / SELECTIONS_DIR
    return sorted(p.parent.name for p in base.glob(f"*/{PLAN_JSON}"))


def repeats_key(name: str) -> str:
    """The Dolma attribute key of a selection's repeat count (a jq identifier)."""
    return dolma.key(name, "selection", "repeats")


@dataclass(frozen=True, kw_only=True)
class Domain:
    """One domain of a selection: its labels (one per axis) and what pass 1 decided."""

    labels: tuple[str, ...]
    weight: float  # the target share
    available_tokens: int  # labelled tokens of the domain (the shard summaries)
    available_docs: int
    target_tokens: float  # budget x weight (after redistribution, when asked)
    rate: float  # expected copies per document, <= max_repeat
    capped: bool  # the rate hit max_repeat (or the domain is empty): a shortfall

    @property
    def planned_tokens(self) -> float:
        """What the rate takes in expectation."""
        return self.rate * self.available_tokens


@dataclass(frozen=True, kw_only=True)
class SelectionPlan:
    """``selection.json``: the request and each domain's rate (pass 1)."""

    name: str
    axes: tuple[str, ...]  # the classifier(s) a domain is a label of
    budget_tokens: int
    max_repeat: int
    seed: int
    redistribute: bool
    partial: bool  # selected from what is labelled of a run not yet complete
    labelled_tasks: int
    population_tasks: int
    shards: tuple[int, ...]  # the shards whose files are selected (summarized)
    domains: tuple[Domain, ...]
    weights_from: str  # where the weights were read
    created_at: str
    format_version: int = FORMAT_VERSION
    #: The run it was made over: run.json's input fingerprint ("" in plans made before it
    #: was recorded) and how many input changes (``plan --extend``) it had by then.
    run_fingerprint: str = ""
    run_changes: int = 0

    def to_json(self) -> bytes:
        """The file's bytes (sorted keys: one plan, one byte string)."""
        return json_bytes(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Parse ``selection.json``; RecordError naming the field when it is not one."""
        f = Fields.parse(raw, where)
        domains = []
        for i, entry in enumerate(f.list("domains")):
            if not isinstance(entry, dict):
                raise f.refuse("domains", f"entry {i} is not an object")
            d = Fields(entry, f"{where} [domains {i}]").into(Domain)
            domains.append(Domain(**{**asdict(d), "labels": tuple(map(str, d.labels))}))
        plan = f.into(cls, domains=tuple(domains))
        if plan.format_version != FORMAT_VERSION:
            raise f.refuse("format_version", f"is {plan.format_version}, not {FORMAT_VERSION}")
        return plan

    def digest(self) -> str:
        """A short hash of the plan: each shard's record says which plan it followed (of
        what decides the selection: the run it was made over is provenance, left out, so
        plans saved before it was recorded keep their hash)."""
        decides = {k: v for k, v in asdict(self).items() if k not in _PROVENANCE}
        return hashlib.sha256(json_bytes(decides)).hexdigest()[:16]

    def rates(self) -> np.ndarray:
        """Each domain's rate, in domain order."""
        return np.array([d.rate for d in self.domains], np.float64)


_PROVENANCE = ("run_fingerprint", "run_changes")


def load_plan(run_dir: Path, name: str) -> SelectionPlan | None:
    """The plan of selection ``name``; None when there is none."""
    path = root(run_dir, name) / PLAN_JSON
    try:
        return SelectionPlan.from_json(path.read_bytes(), str(path))
    except FileNotFoundError:
        return None


def save_plan(run_dir: Path, plan: SelectionPlan) -> SelectionPlan:
    """Create ``selection.json`` unless it exists (a name is planned once: of two
    ``select --name X`` started together exactly one writes); the plan on disk now."""
    path = root(run_dir, plan.name) / PLAN_JSON
    if create_exclusive(path, plan.to_json()):
        return plan
    return SelectionPlan.from_json(path.read_bytes(), str(path))


@dataclass(frozen=True, kw_only=True)
class ShardSelection:
    """``shards/<shard>.json``: one shard's files selected, counted from their sidecars
    (the lists are per domain of the plan, in its order)."""

    shard: int
    plan: str  # SelectionPlan.digest() of the plan followed
    files: int  # files selected from (each has its files/<rel>.parquet)
    docs: tuple[int, ...]  # documents seen per domain
    tokens: tuple[int, ...]  # their tokens
    selected_docs: tuple[int, ...]  # documents taken at least once
    copies: tuple[int, ...]  # documents taken, with repeats
    selected_tokens: tuple[int, ...]  # tokens taken, with repeats
    max_repeats: dict[str, int]  # per file with a document taken: its largest count
    other_docs: int = 0  # documents whose labels are no domain of the plan (never taken)
    format_version: int = FORMAT_VERSION
    #: Each file read: its sidecar's identity (size:version) when read (``freshness``
    #: compares it with the run as it is); None in records made before it was kept.
    read: dict[str, str] | None = None
    #: Files of the shard left out, and why (labels that ``verify`` rejects).
    left_out: dict[str, str] | None = None

    def to_json(self) -> bytes:
        """The file's bytes."""
        return json_bytes(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Parse one; RecordError naming the field when it is not one."""
        f = Fields.parse(raw, where)
        record = f.into(cls)
        lists = (
            record.docs,
            record.tokens,
            record.selected_docs,
            record.copies,
            record.selected_tokens,
        )
        if len({len(x) for x in lists}) != 1:
            raise f.refuse("docs", "and the other per-domain lists differ in length")
        if not all(isinstance(v, int) and v > 0 for v in record.max_repeats.values()):
            raise f.refuse("max_repeats", "must map files to counts >= 1")
        return record


def shard_path(run_dir: Path, name: str, shard: int) -> Path:
    """Where one shard's record of selection ``name`` lies."""
    return root(run_dir, name) / SHARDS_DIR / f"{shard}.json"


def load_shard(run_dir: Path, name: str, shard: int) -> ShardSelection | None:
    """One shard's record; None when the shard is not selected yet."""
    path = shard_path(run_dir, name, shard)
    try:
        return ShardSelection.from_json(path.read_bytes(), str(path))
    except FileNotFoundError:
        return None


def save_shard(run_dir: Path, name: str, record: ShardSelection) -> None:
    """Write one shard's record, after every file of it (atomically)."""
    write_atomic(shard_path(run_dir, name, record.shard), record.to_json())


def shard_records(run_dir: Path, sel: SelectionPlan) -> dict[int, ShardSelection]:
    """The shards of ``sel`` selected already, by shard (by this plan: a record another
    plan of the same name left is not counted)."""
    got, digest = {s: load_shard(run_dir, sel.name, s) for s in sel.shards}, sel.digest()
    return {s: r for s, r in got.items() if r is not None and r.plan == digest}


def uniform(ids: Sequence[str | None], seed: int, rel: str) -> np.ndarray:
    """``h(seed, id)`` in [0, 1) per document: a keyed BLAKE2b of its id (``<rel>#<row>``
    for a document without one), stable across machines and versions of Python."""
    key = f"shardwise-select:{seed}".encode()
    b2 = hashlib.blake2b
    raw = b"".join(
        b2((i if i is not None else f"{rel}#{row}").encode(), digest_size=8, key=key).digest()
        for row, i in enumerate(ids)
    )
    return (np.frombuffer(raw, ">u8") >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def repeats(rate: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``floor(rate) + 1[u < frac(rate)]`` per document (int16)."""
    whole = np.floor(rate)
    return (whole + (u < rate - whole)).astype(np.int16)


def file_table(ids: Sequence[str | None], k: np.ndarray) -> pa.Table:
    """A file's selection: the rows taken at least once, with their id and count."""
    rows = np.flatnonzero(k > 0)
    taken = [ids[r] for r in rows.tolist()]
    return pa.table([rows, pa.array(taken, pa.string()), k[rows].astype(np.int16)], schema=SCHEMA)


def file_bytes(table: pa.Table) -> bytes:
    """A file's selection as Parquet bytes."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def attributes_bytes(rel: str, ids: Sequence[Any], k: np.ndarray, name: str) -> bytes:
    """The Dolma attributes of one file: every row's repeat count (0: not taken)."""
    return dolma.build_rows(rel, ids, {repeats_key(name): k.tolist()})


def retire_mix_configs(run_dir: Path, changed: str) -> list[str]:
    """Once the run changed (``plan --extend``), every selection's mix config describes
    documents the run no longer has as they were: each is retired. The selections retired."""
    return [
        n for n in names(run_dir) if retire_mix_config(run_dir, n, f"the run changed: {changed}")
    ]


def runnable_mix(run_dir: Path, name: str) -> bool:
    """Selection ``name`` has a ``mix.yaml`` that ``dolma mix`` would run (not retired)."""
    mix = root(run_dir, name) / MIX_YAML
    return mix.is_file() and not mix.read_text("utf-8").startswith("# STALE")


def retire_mix_config(run_dir: Path, name: str, why: str) -> bool:
    """Move selection ``name``'s runnable ``mix.yaml`` to ``mix.yaml.stale`` and put in its
    place a config dolma refuses to run (its one stream names no document, and dolma says
    so by the stream's name, which says why); True when there was one to retire."""
    if not runnable_mix(run_dir, name):
        return False
    base = root(run_dir, name)
    (base / MIX_YAML).replace(base / STALE_MIX_YAML)
    write_atomic(base / MIX_YAML, stale_mix_yaml(base, name, why).encode())
    return True


def stale_mix_yaml(base: Path, name: str, why: str) -> str:
    """A mix config that stops ``dolma mix`` with a reason: ``No documents found for the
    paths for stale-selection-<name>-the-labels-changed-select-anew config``."""
    stream = f"stale-selection-{name}-the-labels-changed-select-anew"
    head = [
        f"# STALE: the labels selection {name!r} read changed since ({why}).",
        "# dolma refuses this config on purpose: its stream names no document. The config",
        f"# as it was is {STALE_MIX_YAML} beside this file; select over the run as it is now",
        f"# (`shardwise select --run-dir <run_dir> --name {name}` prints the command).",
    ]
    body = (
        "streams:\n"
        f"- name: {stream}\n"
        f"  documents: ['{base / 'stale' / 'documents'}/*.json.gz']\n"
        f"  attributes: [{name}]\n"
        f"  output: {{path: '{base / 'stale' / 'mix'}', max_size_in_bytes: 1000000000}}\n"
        f"  filter: {{syntax: jq, include: ['.attributes.{repeats_key(name)} >= 1']}}\n"
        "processes: 1\n"
    )
    return "\n".join(head) + "\n" + body


def attribute_set(attributes: Location, name: str) -> Location:
    """Where selection ``name``'s Dolma attribute set lies: beside the labels' own set
    (``<...>/attributes/<name>``, where ``dolma mix`` looks for attribute set ``name``)."""
    parent = attributes.uri.rstrip("/").rpartition("/")[0]
    return Location(f"{parent}/{name}", attributes.options)


def remove_gone(run_dir: Path, attributes: Location | None, rels: Sequence[str]) -> list[str]:
    """Drop gone files from every selection (``plan --extend --gone remove``): their
    ``files/<rel>.parquet`` and their attribute files; the URLs of the attribute files removed."""
    removed = []
    for name in names(run_dir):
        attrs = attribute_set(attributes, name) if attributes is not None else None
        for rel in rels:
            (root(run_dir, name) / FILES_DIR / f"{rel}.parquet").unlink(missing_ok=True)
            if attrs is not None and dolma.applies(rel) and attrs.exists(rel):
                attrs.remove(rel)
                removed.append(attrs.url(rel))
    return removed
