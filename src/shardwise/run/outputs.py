"""The per-file output contract: every file a run writes beside a labelled source file.

:data:`KINDS` names them in write order (data, stats, the marker last), each with how it is
built, parsed into a typed record and checked. Whoever asks "is this an output?" or
"write a file's outputs" asks here: a new kind is one entry; nothing else names a suffix.
"""

import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from shardwise.errors import InputError, RecordError
from shardwise.run import dolma, filestats, markers, sidecar
from shardwise.run.filestats import FileStats
from shardwise.run.labelling import Labelling
from shardwise.run.markers import FileMarker
from shardwise.run.modelpin import ModelIdentity
from shardwise.run.reader import json_ids
from shardwise.store.atomic import is_temp_name
from shardwise.store.lease import LeaseLostError
from shardwise.store.location import Location


@dataclass(frozen=True, kw_only=True)
class Labelled:
    """One labelled source file: what every output kind is built from."""

    rel: str
    task_id: str
    shard: int
    identity: str | None  # the source's identity when it was planned
    ids: list[str | None]
    columns: Mapping[str, pa.Array]  # the label columns, in input order
    stats: FileStats
    dolma_name: str | None = None  # the attribute set's name (``output.dolma``), when on
    holder: tuple[str, int] | None = None  # a campaign's site and lease epoch (the marker)


@dataclass(frozen=True, kw_only=True)
class Expected:
    """What the outputs of one planned file must agree with (``verify``)."""

    rel: str
    task_id: str
    shard: int
    ids: list[str | None] | None  # the input's ids in order; None when it is unreadable
    classifiers: tuple[str, ...]
    labelling: Labelling | None  # as run.json pins it
    id_json: list[str | None] | None = None  # the JSON of the input's non-string ids
    models: Mapping[str, ModelIdentity] | None = None  # the models run.json pins

    @property
    def json_ids(self) -> list[Any] | None:
        """The input's ids as its JSON wrote them (what dolma mix compares)."""
        return None if self.ids is None else json_ids(self.ids, self.id_json)

    @property
    def rows(self) -> int | None:
        """The input's row count, when it was read."""
        return None if self.ids is None else len(self.ids)

    @property
    def counts_tokens(self) -> bool:
        """The labelling pins a counting tokenizer: the sidecar has a ``tokens`` column."""
        return self.labelling is not None and bool(self.labelling.count_tokenizer)


@dataclass(
    frozen=True, eq=False, kw_only=True
)  # compared by identity: a kind is one registry entry
class OutputKind:
    """One kind of per-file output: its name, suffix, builder, parser and checker."""

    name: str
    suffix: str
    build: Callable[[Labelled], bytes]
    #: bytes and where they came from -> a typed record; RecordError when they are not one
    parse: Callable[[bytes, str], Any]
    #: a parsed record against the plan row and the input -> one line per problem
    check: Callable[[Any, Expected], list[str]]
    #: 0 bytes is damage the listing alone shows (a sidecar is never empty)
    nonempty: bool = False
    #: Which root it lies under: ``output`` (``output.uri``) or ``attributes``
    #: (``output.dolma``); a kind whose root the run has not configured is not written.
    root: str = "output"
    #: Which source files get one (all by default; Dolma attributes: JSON Lines only).
    applies: Callable[[str], bool] = lambda _rel: True
    #: Made from the sidecar alone: ``verify --repair`` rewrites it, relabels nothing.
    derived: bool = False

    def rel(self, source: str) -> str:
        """Where this output of source file ``source`` lies under its root."""
        return source + self.suffix


SIDECAR = OutputKind(
    name="sidecar", suffix=sidecar.SUFFIX, parse=sidecar.read_sidecar, nonempty=True,
    build=lambda f: sidecar.to_parquet_bytes(sidecar.build_table(f.ids, dict(f.columns),
                                                                 f.holder)),
    check=lambda table, w: sidecar.problems(table, w.classifiers, w.ids, tokens=w.counts_tokens,
                                            id_json=w.id_json),
)  # fmt: skip
STATS = OutputKind(
    name="stats",
    suffix=filestats.SUFFIX,
    build=lambda f: f.stats.to_json(),
    parse=FileStats.from_json,
    check=lambda stats, want: stats.problems(want.rel, want.rows, want.labelling, want.models),
)
MARKER = OutputKind(
    name="marker", suffix=markers.FILE_MARKER_SUFFIX, parse=FileMarker.from_json,
    build=lambda f: FileMarker.now(f.rel, f.task_id, f.shard, len(f.ids), f.identity,
                                   f.holder).to_json(),
    check=lambda marker, want: marker.problems(want.rel, want.task_id, want.shard, want.rows),
)  # fmt: skip
DOLMA = OutputKind(  # suffix "": the documents' own relative path, under the attributes root
    name="dolma",
    suffix="",
    parse=dolma.AttributesFile.from_bytes,
    root="attributes",
    applies=dolma.applies,
    build=lambda f: dolma.build(f.rel, f.ids, f.columns, f.dolma_name or "weborganizer"),
    check=lambda attrs, want: attrs.problems(want.json_ids, want.classifiers),
    derived=True,
)
#: Every per-file output, in write order: data kinds, then STATS, then MARKER (last).
KINDS: tuple[OutputKind, ...] = (SIDECAR, DOLMA, STATS, MARKER)


def holder_of(kind: OutputKind, record: Any) -> tuple[str, int] | None:
    """The campaign site and lease epoch an output's parsed record names (None: none)."""
    if kind is SIDECAR:
        return sidecar.holder_of(record)
    site, epoch = getattr(record, "site", None), getattr(record, "lease_epoch", None)
    return None if site is None or epoch is None else (site, epoch)


def kinds() -> tuple[OutputKind, ...]:
    """The registry as it is now (read at call time, so a test may add a kind)."""
    return KINDS


def vouched() -> tuple[OutputKind, ...]:
    """What a file's marker vouches for: every kind but the marker."""
    return tuple(kind for kind in kinds() if kind is not MARKER)


def wanted(rel: str, roots: Iterable[str]) -> tuple[OutputKind, ...]:
    """The kinds a marker of ``rel`` vouches for, given the roots the run configured."""
    have = set(roots)
    return tuple(k for k in vouched() if k.root in have and k.applies(rel))


def kind_of(name: str) -> tuple[OutputKind, str] | None:
    """(kind, source file) for the name of a shardwise output, else None (the longest
    suffix wins: ``x.labels.parquet`` is never an output of ``x`` of a shorter kind)."""
    return _matcher(tuple(k for k in kinds() if k.root == "output"))(name)


@functools.cache
def _matcher(registry: tuple[OutputKind, ...]) -> Callable[[str], tuple[OutputKind, str] | None]:
    """:func:`kind_of` for one registry (its kinds sorted once: it runs per listed name)."""
    longest_first = sorted(registry, key=lambda k: -len(k.suffix))
    suffixes = tuple(k.suffix for k in longest_first)

    def match(name: str) -> tuple[OutputKind, str] | None:
        if not name.endswith(suffixes):
            return None
        for kind in longest_first:
            if name.endswith(kind.suffix) and len(name) > len(kind.suffix):
                return kind, name[: -len(kind.suffix)]
        return None

    return match


def read_marker(output: Location, rel: str) -> FileMarker:
    """The marker of source file ``rel``; FileNotFoundError, or RecordError when it is
    unreadable (it then vouches for nothing: the file is labelled again)."""
    return MARKER.parse(output.read_bytes(MARKER.rel(rel)), output.url(MARKER.rel(rel)))


def label_problems(
    output: Location, rel: str, labelling: Labelling | None, models: Mapping[str, ModelIdentity]
) -> list[str]:
    """Why ``verify`` rejects the labels of ``rel`` as another set-up's (another model,
    another labelling): its stats checked as ``verify`` checks them (:data:`STATS`), the
    input's rows aside (a view reads no input). What a view that reads labels asks before
    it takes them; a file with no readable stats is named so."""
    where = output.url(STATS.rel(rel))
    try:
        stats = STATS.parse(output.read_bytes(STATS.rel(rel)), where)
    except FileNotFoundError:
        return [f"{where}: no stats (what vouches for the labels' models)"]
    except RecordError as e:
        return [f"{where}: unreadable stats: {e.reason}"]
    return stats_problems(stats, rel, labelling, models)


def stats_problems(
    stats: FileStats,
    rel: str,
    labelling: Labelling | None,
    models: Mapping[str, ModelIdentity] | None,
) -> list[str]:
    """The stats of ``rel`` checked as ``verify`` checks them (:data:`STATS`), the input's
    rows aside: why its labels are not the run's, or []."""
    want = Expected(
        rel=rel, task_id="", shard=-1, ids=None, classifiers=(), labelling=labelling, models=models
    )
    return STATS.check(stats, want)


def marked(output: Location) -> set[str]:
    """The source files with a marker under ``output`` (one listing)."""
    return set(scan(rel for rel, _size in output.list_files()).of(MARKER))


def rebuild(roots: Mapping[str, Location], rel: str, dolma_name: str | None) -> list[str]:
    """Write the derived outputs of a labelled file again from its sidecar alone (no
    document is read, no model runs): what ``verify --repair`` and ``shardwise dolma
    export`` do for a missing or damaged one. The URLs written."""
    where = roots["output"].url(SIDECAR.rel(rel))
    try:
        table = SIDECAR.parse(roots["output"].read_bytes(SIDECAR.rel(rel)), where)
    except FileNotFoundError as e:
        msg = f"{where} is missing although {rel} has a marker: its labels are gone, so nothing "
        msg += "can be derived from them; `shardwise verify --repair` relabels the file"
        raise InputError(msg) from e
    columns = {name: table[name].combine_chunks() for name in table.column_names if name != "id"}
    ids = table["id"].to_pylist()
    labelled = Labelled(
        rel=rel,
        task_id="",
        shard=-1,
        identity=None,
        ids=ids,
        columns=columns,
        stats=FileStats(),
        dolma_name=dolma_name,
    )
    written = []
    for kind in kinds():
        if kind.derived and kind.root in roots and kind.applies(rel):
            roots[kind.root].write_bytes(kind.rel(rel), kind.build(labelled))
            written.append(roots[kind.root].url(kind.rel(rel)))
    return written


def write_all(
    roots: Mapping[str, Location],
    labelled: Labelled,
    vouch: Callable[[], contextlib.AbstractContextManager[bool]] | None = None,
    fence: Callable[[], None] | None = None,
) -> FileStats | None:
    """Write every output of a labelled file that applies, each atomically under its root,
    in registry order: the marker last, so it never vouches for an output not yet whole. The
    stats record the time the writes before them took; they are returned as written.
    ``vouch``: held while the marker is written; when it says no (the file was quarantined
    meanwhile), the other outputs are removed, no marker is written, and None returned.
    In a campaign (``labelled.holder``) each output records the site and lease epoch
    writing it, ``fence`` runs before each write (it raises once this job's lease may have
    run out), and the marker is created only if absent: a holder that stalled past its
    lease while another site labelled the file loses the race (``LeaseLostError``)."""
    started = time.perf_counter()
    if labelled.holder is not None:
        site, epoch = labelled.holder
        labelled = replace(labelled, stats=replace(labelled.stats, site=site, lease_epoch=epoch))
    check = fence or (lambda: None)
    for kind in kinds():
        if kind is MARKER or kind.root not in roots or not kind.applies(labelled.rel):
            continue
        if kind is STATS:
            stats = labelled.stats.with_write(time.perf_counter() - started)
            labelled = replace(labelled, stats=stats)
        check()
        roots[kind.root].write_bytes(kind.rel(labelled.rel), kind.build(labelled))
    with vouch() if vouch is not None else contextlib.nullcontext(True) as ok:
        if ok:
            check()
            _write_marker(roots[MARKER.root], labelled)
    if not ok:
        remove_all(roots, labelled.rel)
        return None
    return labelled.stats


def _write_marker(output: Location, labelled: Labelled) -> None:
    """The marker; in a campaign created only where none is (another site's stands)."""
    rel, body = MARKER.rel(labelled.rel), MARKER.build(labelled)
    if labelled.holder is None:
        output.write_bytes(rel, body)
        return
    if not output.create_if_absent(rel, body):
        site, epoch = labelled.holder
        try:
            there = MARKER.parse(output.read_bytes(rel), output.url(rel))
        except (FileNotFoundError, RecordError):
            there = None
        if there is not None and (there.site, there.lease_epoch) == (site, epoch):
            return  # a retried PUT whose first try landed: this job's own marker
        msg = f"{output.url(rel)}: another holder marked this file first; this job (site "
        msg += f"{site!r}, epoch {epoch}) writes no more (`shardwise verify` names the file if "
        raise LeaseLostError(msg + "its other outputs are now a mix of two holders')")


def remove_all(roots: Mapping[str, Location], rel: str) -> list[str]:
    """Remove every output of source file ``rel`` that exists, the marker first (the
    reverse of ``write_all``: never a marker over missing outputs); the URLs removed."""
    removed = []
    for kind in (MARKER, *(k for k in kinds() if k is not MARKER)):
        loc = roots.get(kind.root)
        if loc is not None and loc.exists(kind.rel(rel)):
            loc.remove(kind.rel(rel))
            removed.append(loc.url(kind.rel(rel)))
    return removed


@dataclass(frozen=True)
class Scan:
    """One listing of an output root, sorted by kind: source file -> size, per kind."""

    found: dict[str, dict[str, int]] = field(default_factory=dict)  # kind name -> files

    def of(self, kind: OutputKind) -> dict[str, int]:
        """The source files that have an output of ``kind``, with its size."""
        return self.found.get(kind.name, {})


def scan(names: Iterable[str], sizes: Mapping[str, int] | None = None) -> Scan:
    """The outputs among the names of a listing of the output root (sizes when known)."""
    found: dict[str, dict[str, int]] = {kind.name: {} for kind in kinds()}
    match = _matcher(tuple(k for k in kinds() if k.root == "output"))
    for name in names:
        hit = match(name)
        if hit is not None:
            found[hit[0].name][hit[1]] = sizes.get(name, 0) if sizes else 0
    return Scan(found)


def scan_roots(roots: Mapping[str, Location]) -> Scan:
    """One listing of each root: the output root by suffix, every other root's files as
    outputs of the kinds that live there (of the source of the same name)."""
    listing = dict(roots["output"].list_files())
    found = scan(listing, listing)
    for name, loc in roots.items():
        if name == "output":
            continue
        files = dict(loc.list_files())
        for kind in kinds():
            if kind.root == name:
                found.found[kind.name] = {
                    f.removesuffix(kind.suffix): size
                    for f, size in files.items()
                    if f.endswith(kind.suffix) and not is_temp_name(f.rsplit("/", 1)[-1])
                }
    return found
