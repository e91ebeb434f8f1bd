"""The figures of many files' stats as columns: the one reader of them in bulk.

Rates, the ETA, data-quality totals and coverage's totals are numpy expressions over
these columns. Every column comes from ``FileStats``' own figure marks
(``filestats.figure_fields``): a figure added there is read here, from stats files,
shard markers and journal lines alike, with no edit of this module. Stats files are
read by Arrow's JSON reader (~3x a record per file, most of the coverage report's time on
a 50k-file run); the figures markers and journals keep, and anything Arrow refuses, are
first cleaned to the schema's types (a value of the wrong type is a missing one: one
malformed file must not hide the report) and read by the same converter.
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from shardwise.errors import RecordError
from shardwise.run.fields import QUALITY_COUNTS
from shardwise.run.filestats import ARROW_SCHEMA, Figure, figure_fields
from shardwise.run.reader import arrow_owned
from shardwise.run.record import load_object

#: The columns of :attr:`StatsTable.quality`: the reader's counts, then ``truncated_docs``.
QUALITY = (*QUALITY_COUNTS, "truncated_docs")
#: Every column, by how it is read: the file and its shard, then each figure.
_KEYS = {"file": Figure("name"), "shard": Figure("index")}


def columns() -> dict[str, Figure]:
    """Each column of a :class:`StatsTable` and how it is read."""
    return {**_KEYS, **figure_fields()}


@dataclass(frozen=True, eq=False)
class StatsTable:
    """Stats as columns, one row per file (``columns`` keys: :func:`columns`). A number is
    float64, NaN when absent (``shard``: int64, -1); a name is a str object; a time is POSIX
    seconds; counts a (files x QUALITY_COUNTS) float64 matrix; entries a list per file."""

    by_name: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return int(self.by_name["file"].size)

    def column(self, name: str) -> np.ndarray:
        """One column (:func:`columns`)."""
        return self.by_name[name]

    file = property(lambda self: self.by_name["file"], doc="object: each row's file")
    shard = property(lambda self: self.by_name["shard"], doc="int64: its shard, -1 unknown")
    device_name = property(lambda self: self.by_name["device_name"], doc="object: GPU type")
    docs = property(lambda self: self.by_name["docs"], doc="float64: documents labelled")
    tokens = property(lambda self: self.by_name["tokens"], doc="float64: classifier tokens")
    seconds = property(lambda self: self.by_name["seconds"], doc="float64: the file's time")
    bytes = property(lambda self: self.by_name["bytes"], doc="float64: the input's size")
    finished_at = property(lambda self: self.by_name["finished_at"], doc="float64: POSIX s")
    fidelity = property(lambda self: self.by_name["fidelity"], doc="object: entries per file")

    @property
    def quality(self) -> np.ndarray:
        """float64 (files x QUALITY): the data-quality counts, NaN when absent."""
        truncated = self.by_name["truncated_docs"].reshape(-1, 1)
        return np.hstack([self.by_name["counts"], truncated])

    def select(self, mask: np.ndarray) -> Self:
        """The rows where ``mask`` is true."""
        return StatsTable({name: values[mask] for name, values in self.by_name.items()})

    def with_bytes(self, sizes: np.ndarray) -> Self:
        """A copy whose missing ``bytes`` are taken from ``sizes`` (e.g. the plan's)."""
        filled = np.where(np.isnan(self.bytes), sizes, self.bytes)
        return StatsTable({**self.by_name, "bytes": filled})


def from_json(blobs: Iterable[bytes]) -> StatsTable:
    """The figures of many ``.stats.json`` contents at once (module docstring); a file
    that is no JSON object is left out."""
    docs = [b for b in blobs if b.strip()]
    if not docs:
        return from_rows(())
    blob = b"\n".join(b.replace(b"\r", b" ").replace(b"\n", b" ") for b in docs)
    read = pa_json.ReadOptions(use_threads=True, block_size=1 << 24)
    parse = pa_json.ParseOptions(explicit_schema=ARROW_SCHEMA, unexpected_field_behavior="ignore")
    try:
        table = pa_json.read_json(pa.BufferReader(arrow_owned(blob)), read, parse)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return from_rows(_objects(docs))
    if table.num_rows != len(docs):
        return from_rows(_objects(docs))
    return latest_per_file(_of_arrow(table))


def from_rows(rows: Iterable[Mapping[str, Any]]) -> StatsTable:
    """The figures of stats as dicts (what shard markers and journals keep), cleaned to
    the schema's types (module docstring)."""
    clean = [{f.name: _clean(row.get(f.name), f.type) for f in ARROW_SCHEMA} for row in rows]
    return latest_per_file(_of_arrow(pa.Table.from_pylist(clean, schema=ARROW_SCHEMA)))


def _clean(value: Any, kind: pa.DataType) -> Any:
    """``value`` as ``kind`` holds it, None when it is of another type."""
    if pa.types.is_struct(kind):
        ok = isinstance(value, dict)
        return {f.name: _clean(value.get(f.name), f.type) for f in kind} if ok else None
    if pa.types.is_list(kind):
        ok = isinstance(value, list)
        return [_clean(v, kind.value_type) for v in value if isinstance(v, dict)] if ok else None
    if pa.types.is_floating(kind):
        return None if math.isnan(number(value)) else value
    wanted = str if pa.types.is_string(kind) else bool
    return value if isinstance(value, wanted) else None


def _objects(docs: Iterable[bytes]) -> Iterable[dict[str, Any]]:
    for doc in docs:
        try:
            yield load_object(doc, "stats")
        except RecordError:
            continue


def _of_arrow(table: pa.Table) -> StatsTable:
    """The one converter: each column as :func:`columns` says."""
    return StatsTable({name: _column(table[name], how) for name, how in columns().items()})


def _column(values: pa.ChunkedArray, how: Figure) -> np.ndarray:
    if how.column in ("number", "index"):
        floats = values.to_numpy().astype(np.float64)  # nulls -> NaN
        if how.column == "number":
            return floats
        return np.where(np.isfinite(floats), floats, -1).astype(np.int64)
    if how.column == "name":
        return np.array(values.fill_null(how.missing).to_pylist(), dtype=object)
    if how.column == "time":
        return _epoch_seconds(values)
    if how.column == "counts":
        counts = values.combine_chunks()
        fields = [pc.struct_field(counts, k).to_numpy(zero_copy_only=False) for k in QUALITY_COUNTS]
        return np.column_stack(fields).astype(np.float64)
    return objects([v or [] for v in values.to_pylist()])


def _epoch_seconds(values: pa.ChunkedArray) -> np.ndarray:
    """ISO 8601 strings -> POSIX seconds, vectorised; per value only if Arrow refuses."""
    try:
        stamps = pc.cast(values, pa.timestamp("us", tz="UTC"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return np.array([parse_time(v) for v in values.to_pylist()], dtype=np.float64)
    micros = pc.cast(stamps, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64)
    return micros / 1e6


def parse_time(value: object) -> float:
    """ISO 8601 -> POSIX seconds (naive means UTC); NaN when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return math.nan
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return math.nan
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def number(value: Any) -> float:
    """A finite float, or NaN for anything else (bools, strings, None)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def objects(values: list[Any]) -> np.ndarray:
    """A 1-d object array of ``values`` (numpy would make a list of lists 2-d)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def concat(*tables: StatsTable) -> StatsTable:
    """The rows of several tables; a file in more than one keeps its latest row."""
    names = tables[0].by_name
    return latest_per_file(
        StatsTable({n: np.concatenate([t.by_name[n] for t in tables]) for n in names})
    )


def latest_per_file(t: StatsTable) -> StatsTable:
    """One row per non-empty ``file``, the one with the latest ``finished_at``: a file
    seen twice (a listing that caught a rewrite, merged roots) would double its docs."""
    named = t.file != ""
    if np.unique(t.file[named]).size == int(named.sum()):
        return t
    when = np.where(np.isnan(t.finished_at), -np.inf, t.finished_at)
    order = np.lexsort((when, t.file.astype(str)))
    files = t.file[order]
    last = np.ones(order.size, dtype=bool)
    last[:-1] = files[1:] != files[:-1]
    keep = np.zeros(order.size, dtype=bool)
    keep[order[last]] = True
    return t.select(keep | ~named)


def quality_totals(stats: StatsTable, mask: np.ndarray | None = None) -> dict[str, int]:
    """Sums of the data-quality counts over ``stats`` (rows in ``mask``), zeros left out."""
    matrix = stats.quality if mask is None else stats.quality[mask]
    sums = np.nansum(matrix, axis=0) if matrix.size else np.zeros(len(QUALITY))
    return {k: int(v) for k, v in zip(QUALITY, sums, strict=True) if v}
