"""Read one source file's documents: id, text and url, nothing else.

Parquet with column projection, JSON Lines streamed; fields may be dotted paths. A field in
*no* row of a file is a config typo, refused with the fields found; imperfect rows are
labelled and counted (``Documents.counts``); an unparsable file is an InputError naming it.
"""

import contextlib
import io
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardwise.errors import InputError
from shardwise.run import jsonl
from shardwise.run.fields import CONFIG_KEYS, NULL_COUNTS, Documents, FieldPaths, absent_field_error
from shardwise.store.location import Location

#: File types the reader reads, longest suffix first (``input.format: auto``). Dolma names
#: its JSON Lines ``.json.gz`` / ``.json.zst`` (and ``.json``): they are JSON Lines too.
_JSONL = (".jsonl.zst", ".jsonl.gz", ".jsonl", ".json.zst", ".json.gz", ".json")
SUFFIXES: dict[str, str] = {**dict.fromkeys(_JSONL, "jsonl"), ".parquet": "parquet"}
#: How the formats are named in messages.
SUFFIX_LIST = ", ".join(SUFFIXES)


def json_ids(ids: Sequence[str | None], id_json: Sequence[str | None] | None) -> list[Any]:
    """The ids as the input's JSON wrote them: an integer id an integer again."""
    if id_json is None:
        return list(ids)
    return [i if j is None else json.loads(j) for i, j in zip(ids, id_json, strict=True)]


def file_format(rel: str) -> str | None:
    """``parquet`` or ``jsonl`` from the file name, None for anything else."""
    for suffix, fmt in SUFFIXES.items():
        if rel.endswith(suffix):
            return fmt
    return None


def read_documents(loc: Location, rel: str, fields: FieldPaths, fmt: str = "auto") -> Documents:
    """Read ``rel`` under ``loc``; raise InputError naming the file on any failure."""
    kind = file_format(rel) if fmt == "auto" else fmt
    where = loc.url(rel)
    try:
        if kind == "parquet":
            with _parquet_source(loc, rel) as source:
                docs = _read_parquet(source, fields, where)
        elif kind == "jsonl":
            with loc.open(rel) as fh:
                docs = jsonl.read_jsonl(jsonl.decompressed(fh, rel), fields, where)
        else:
            raise InputError(f"{where}: unsupported file type (want one of {SUFFIX_LIST})")
    except InputError:
        raise
    except FileNotFoundError as e:
        raise InputError(f"{where}: file not found (was it removed after planning?)") from e
    except (OSError, EOFError, ValueError, pa.ArrowException) as e:
        raise InputError(f"{where}: cannot read {kind} file: {type(e).__name__}: {e}") from e
    present = [i for i in docs.ids if i is not None]
    dupes = len(present) - len(set(present))
    if dupes:
        docs.counts["duplicate_ids"] = dupes
    # "" and whitespace-only texts say as little as a null one: counted the same way
    blank = sum(1 for t in docs.texts if not t or t.isspace())
    empty = blank - docs.counts.get("missing_text", 0) - docs.counts.get("null_texts", 0)
    if empty > 0:
        docs.counts["empty_texts"] = empty
    return docs


def check_fields(
    loc: Location, rel: str, fields: FieldPaths, fmt: str = "auto", *, rows: int = 100
) -> None:
    """Check that every configured field is in ``rel``, reading as little as possible (a
    Parquet footer, a JSONL file's first ``rows`` rows), by the job's own rule and message."""
    kind = file_format(rel) if fmt == "auto" else fmt
    where = loc.url(rel)
    try:
        if kind == "parquet":
            with _parquet_source(loc, rel) as source:
                pf = pq.ParquetFile(source)
                _check_schema(pf.schema_arrow, pf.metadata.num_rows, fields, where)
        elif kind == "jsonl":
            with loc.open(rel, block_size=1 << 18) as fh:
                jsonl.read_jsonl(jsonl.decompressed(fh, rel), fields, where, limit=rows)
    except InputError:
        raise
    except (OSError, EOFError, ValueError, pa.ArrowException) as e:
        raise InputError(f"{where}: cannot read {kind} file: {type(e).__name__}: {e}") from e


def schema_paths(schema: pa.Schema) -> set[str]:
    """Every dotted field path of an Arrow schema, through nested structs."""
    out: set[str] = set()

    def walk(prefix: str, typ: pa.DataType) -> None:
        if pa.types.is_struct(typ):
            for i in range(typ.num_fields):
                child = typ.field(i)
                name = f"{prefix}.{child.name}"
                out.add(name)
                walk(name, child.type)

    for f in schema:
        out.add(f.name)
        walk(f.name, f.type)
    return out


def arrow_owned(data: bytes) -> pa.Buffer:
    """``data`` copied into memory Arrow allocated: a buffer over Python ``bytes`` freed by
    an Arrow thread at interpreter exit cannot take the GIL and aborts the process."""
    sink = pa.BufferOutputStream()
    sink.write(data)
    return sink.getvalue()


@contextlib.contextmanager
def _parquet_source(loc: Location, rel: str) -> Iterator[pa.NativeFile]:
    """``rel`` as a file Arrow reads without calling back into Python where it can (an
    Arrow thread holding a Python file at exit aborted the process, exit 134): local files
    natively, small remote ones as a buffer, large remote ones on the calling thread only."""
    if not loc.remote:
        with pa.OSFile(loc.path(rel), "rb") as native:
            yield native
        return
    with loc.open(rel) as fh:
        if isinstance(fh, io.BytesIO):
            yield pa.BufferReader(arrow_owned(fh.getvalue()))
        else:
            yield pa.PythonFile(fh, mode="r")


def _read_parquet(source: pa.NativeFile, fields: FieldPaths, where: str) -> Documents:
    pf = pq.ParquetFile(source)
    schema = pf.schema_arrow
    wanted = fields.wanted()
    _check_schema(schema, pf.metadata.num_rows, fields, where)
    columns: list[str] = []
    for path in wanted.values():
        top = path if path in schema.names else path.split(".", 1)[0]
        if top in schema.names and top not in columns:
            columns.append(top)
    # Arrow's threads never touch a Python file (see _parquet_source)
    table = pf.read(columns=columns, use_threads=not isinstance(source, pa.PythonFile))
    n = table.num_rows
    counts: Counter[str] = Counter()
    values: dict[str, list] = {"url": [""] * n}
    for role, path in wanted.items():
        raw, missing = _column(table, path)
        keep = role == "id"  # an absent id stays None; text and url read as ""
        values[role] = _strings(raw, n=n, keep_null=keep, counts=counts, role=role, where=where)
        nulls = values[role].count(None) if keep else (raw.null_count if raw is not None else 0)
        counts[f"missing_{role}"], counts[NULL_COUNTS[role]] = missing, nulls - missing
    return Documents(ids=values["id"], texts=values["text"], urls=values["url"], counts=+counts)


def _check_schema(schema: pa.Schema, rows: int, fields: FieldPaths, where: str) -> None:
    """Every configured field is a path of a non-empty file's schema, or FieldMissingError."""
    if not rows:
        return
    paths = schema_paths(schema)
    for role, path in fields.wanted().items():
        if path not in paths:
            raise absent_field_error(where, role, path, rows, paths)


def _column(table: pa.Table, path: str) -> tuple[pa.ChunkedArray | None, int]:
    """The column at a dotted path, and in how many rows it is absent (a null parent struct:
    absent, as a JSON line without the key; a null leaf is a null value)."""
    if path in table.column_names:
        return table[path], 0
    top, *rest = path.split(".")
    if top not in table.column_names:
        return None, 0
    col = table[top]
    absent = None
    for part in rest:
        if not pa.types.is_struct(col.type) or col.type.get_field_index(part) < 0:
            return None, 0
        here = pc.is_null(col)
        absent = here if absent is None else pc.or_(absent, here)
        col = pc.struct_field(col, part)
    missing = int(pc.sum(absent).as_py() or 0) if absent is not None else 0
    return col, missing


def _strings(
    col: pa.ChunkedArray | None,
    n: int = 0,
    *,
    keep_null: bool = False,
    counts: Counter[str] | None = None,
    role: str = "",
    where: str = "",
) -> list:
    """A column as Python strings: invalid UTF-8 replaced and counted (writers do not all
    validate it), a non-string text column cast (``non_string_texts``)."""
    if col is None:
        return [None] * n if keep_null else [""] * n
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        values = _decode_replacing(col.to_pylist(), counts)
    else:
        if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
            try:
                cast = pc.cast(col, pa.string())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                msg = f"{where}: {CONFIG_KEYS.get(role, 'field')} is of type {col.type}, not text"
                raise InputError(msg) from e
            if role == "text" and counts is not None:
                counts["non_string_texts"] += len(col) - col.null_count
            col = cast
        try:
            values = col.to_pylist()
        except UnicodeDecodeError:  # a "string" column holding invalid bytes
            binary = pa.large_binary() if pa.types.is_large_string(col.type) else pa.binary()
            raw = pa.chunked_array([c.view(binary) for c in col.chunks], binary)
            values = _decode_replacing(raw.to_pylist(), counts)
    return values if keep_null else ["" if v is None else v for v in values]


def _decode_replacing(values: list[bytes | None], counts: Counter[str] | None) -> list:
    out: list[str | None] = []
    bad = 0
    for v in values:
        if v is None:
            out.append(None)
            continue
        try:
            out.append(v.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(v.decode("utf-8", errors="replace"))
            bad += 1
    if bad and counts is not None:
        counts["invalid_utf8_values"] += bad
    return out
