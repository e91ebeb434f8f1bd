"""Read one source file's documents: id, text and url, nothing else.

Parquet with column projection, JSON Lines streamed; fields may be dotted paths. A field in
*no* row of a file is a config typo, refused with the fields found; imperfect rows are
labelled and counted (``Documents.counts``); an unparsable file is an InputError naming it.
"""

import contextlib
import difflib
import gzip
import io
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import zstandard

from shardwise.errors import FieldMissingError, InputError
from shardwise.store.location import Location

#: File types the reader reads, longest suffix first (``input.format: auto``). Dolma names
#: its JSON Lines ``.json.gz`` / ``.json.zst`` (and ``.json``): they are JSON Lines too.
_JSONL = (".jsonl.zst", ".jsonl.gz", ".jsonl", ".json.zst", ".json.gz", ".json")
SUFFIXES: dict[str, str] = {**dict.fromkeys(_JSONL, "jsonl"), ".parquet": "parquet"}
#: How the formats are named in messages.
SUFFIX_LIST = ", ".join(SUFFIXES)

#: Data-quality counts a file's stats hold under ``counts`` (views add them up).
QUALITY_COUNTS = (
    "missing_text", "null_texts", "empty_texts", "non_string_texts", "missing_id", "null_ids",
    "duplicate_ids", "missing_url", "null_urls", "invalid_utf8_lines", "invalid_utf8_values",
    "utf8_bom_lines",
)  # fmt: skip
#: The config key behind each field, for messages that say what to fix.
CONFIG_KEYS = {"id": "input.id_field", "text": "input.text_field", "url": "input.url_field"}
#: JSONL rows whose key paths are collected to list the fields a file does have.
_SAMPLE_ROWS = 200
#: How deep nested objects are listed in that message (``a.b.c``).
_LIST_DEPTH = 3
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class FieldPaths:
    """Where the values live in a record (dotted paths allowed); ``url`` None when no
    classifier reads it (then neither read nor required)."""

    id: str = "id"
    text: str = "text"
    url: str | None = "url"

    def wanted(self) -> dict[str, str]:
        """Role (id, text, url) -> path, for the fields that are read."""
        out = {"id": self.id, "text": self.text}
        if self.url is not None:
            out["url"] = self.url
        return out


@dataclass(kw_only=True)
class Documents:
    """One file's documents in input order."""

    ids: list[str | None]
    texts: list[str]
    urls: list[str]
    counts: Counter[str] = field(default_factory=Counter)
    #: Per row, the JSON text of an id that is not a JSON string (None for a string id);
    #: None when every id is a string: dolma mix matches ids by JSON type (``0 != "0"``).
    id_json: list[str | None] | None = None

    def __len__(self) -> int:
        return len(self.texts)


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
                docs = _read_jsonl(_decompressed(fh, rel), fields, where)
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


def absent_field_error(
    where: str, role: str, path: str, rows: int, available: Iterable[str]
) -> FieldMissingError:
    """The error for a configured field that no row of a file has (names the fix)."""
    found = tuple(sorted(set(available)))
    advice = field_advice(CONFIG_KEYS[role], path, found)
    msg = f"{where}: {CONFIG_KEYS[role]} {path!r} is in none of its {rows:,} row(s); {advice}"
    return FieldMissingError(
        msg, config_key=CONFIG_KEYS[role], path=path, found=found, advice=advice
    )


def field_advice(
    config_key: str, path: str, found: Iterable[str], kept: str = "nothing of this file was written"
) -> str:
    """What to do about a field no row has: the fields found, the closest one, the fix,
    and ``kept``: what the failure left as it was."""
    found = sorted(set(found))
    close = difflib.get_close_matches(path, found, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(found[:40]) + (f", ... ({len(found)} in all)" if len(found) > 40 else "")
    text = f"fields found: {listed or '(none)'}.{hint} Fix {config_key} in the config and run "
    return text + f"again ({kept})."


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
                _read_jsonl(_decompressed(fh, rel), fields, where, limit=rows)
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
        counts[f"missing_{role}"], counts[_NULL_COUNTS[role]] = missing, nulls - missing
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


def _decompressed(fh: IO[bytes], rel: str) -> IO[bytes]:
    if rel.endswith(".gz"):
        return gzip.GzipFile(fileobj=fh)
    if rel.endswith(".zst"):
        return _ZstdFrames(fh)  # type: ignore[return-value]
    return fh


class _ZstdFrames(io.RawIOBase):
    """Concatenated zstd frames as one stream; EOFError when the last frame is cut short
    (``stream_reader`` ends cleanly there: a cut file would be labelled with fewer rows)."""

    def __init__(self, fh: IO[bytes], chunk_size: int = 1 << 20) -> None:
        self._fh, self._chunk_size = fh, chunk_size
        self._dctx = zstandard.ZstdDecompressor()
        self._frame: Any = None  # the decompressobj of the current frame
        self._pending = b""  # input left over after a frame ended
        self._out = b""
        self._pos = 0

    def readable(self) -> bool:
        return True

    def _fill(self) -> bool:
        """Decompress until some output is ready; False at a clean end of input."""
        while self._pos >= len(self._out):
            if self._pending:
                data, self._pending = self._pending, b""
            else:
                data = self._fh.read(self._chunk_size)
                if not data:
                    if self._frame is not None and not self._frame.eof:
                        msg = "zstd stream ended in the middle of a frame (truncated file)"
                        raise EOFError(msg)
                    return False
            if self._frame is None or self._frame.eof:
                self._frame = self._dctx.decompressobj()
            self._out, self._pos = self._frame.decompress(data), 0
            if self._frame.eof:
                self._pending = self._frame.unused_data
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._fill():
            return 0
        n = min(len(buffer), len(self._out) - self._pos)
        buffer[:n] = self._out[self._pos : self._pos + n]
        self._pos += n
        return n


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    yield from io.BufferedReader(stream, buffer_size=1 << 20)  # type: ignore[arg-type]


_ABSENT = object()


def _lookup(record: dict[str, Any], path: str) -> Any:
    """The value at a dotted path, or ``_ABSENT`` when a key on the way is missing (a
    literal key holding dots wins: ``{"a.b": 1}``)."""
    if path in record:
        return record[path]
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _key_paths(record: dict[str, Any], prefix: str = "", depth: int = _LIST_DEPTH) -> Iterator[str]:
    """The dotted key paths of a JSON object, down to ``depth`` levels (for messages)."""
    for key, value in record.items():
        path = f"{prefix}{key}"
        yield path
        if depth > 1 and isinstance(value, dict):
            yield from _key_paths(value, f"{path}.", depth - 1)


#: A ``\\uD800``-``\\uDFFF`` escape: JSON may spell a lone surrogate, UTF-8 cannot hold one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_surrogates(value: str) -> tuple[str, bool]:
    """Replace lone surrogates (which would fail the tokenizer and Arrow) with U+FFFD."""
    fixed = _SURROGATE.sub("\ufffd", value)
    return fixed, fixed != value


#: Per role: the count a null value adds to, and what an absent or null value reads as.
_NULL_COUNTS = {"id": "null_ids", "text": "null_texts", "url": "null_urls"}
_EMPTY: dict[str, str | None] = {"id": None, "text": "", "url": ""}


def _value(
    record: dict[str, Any], path: str, role: str, missing: Counter[str], counts: Counter[str]
) -> str | None:
    """One field of a JSONL record by the policy: absent, null and non-string are counted."""
    value = _lookup(record, path)
    if value is _ABSENT:
        missing[role] += 1
        return _EMPTY[role]
    if value is None:
        counts[_NULL_COUNTS[role]] += 1
        return _EMPTY[role]
    if isinstance(value, str):
        return value
    if role == "text":
        counts["non_string_texts"] += 1
    return str(value)


def _parse_line(raw: bytes, lineno: int, where: str) -> tuple[dict[str, Any], bool]:
    """One JSONL line as an object, and whether it held invalid UTF-8 (replaced)."""
    try:
        line, bad_unicode = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        line, bad_unicode = raw.decode("utf-8", errors="replace"), True
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        msg = f"{where}: line {lineno} is not valid JSON: {e}{_one_document(where, lineno)}"
        raise InputError(msg) from e
    if not isinstance(record, dict):
        what = f"a JSON {type(record).__name__}, not an object"
        raise InputError(f"{where}: line {lineno} is {what}{_one_document(where, lineno)}")
    return record, bad_unicode


def _one_document(where: str, lineno: int) -> str:
    """The likely cause when the first line of a ``.json*`` file is not an object."""
    if lineno != 1 or not _JSON_NAME.search(where):
        return ""
    text = ". It looks like one JSON document, not JSON Lines: shardwise reads .json, "
    text += ".json.gz and .json.zst as JSON Lines (one object per line, as Dolma writes them). "
    return text + "Convert it to one object per line, or leave it out with input.glob"


_JSON_NAME = re.compile(r"\.json(\.gz|\.zst)?$")


def _read_jsonl(
    stream: IO[bytes], fields: FieldPaths, where: str, limit: int | None = None
) -> Documents:
    """The documents of a JSONL stream; only the first ``limit`` rows when given (a sample)."""
    ids: list[str | None] = []
    id_json: list[str | None] = []
    texts: list[str] = []
    urls: list[str] = []
    counts, missing = Counter[str](), Counter[str]()
    seen_paths: set[str] = set()
    url_path = fields.url
    rows = 0
    for lineno, line_bytes in enumerate(_lines(stream), start=1):
        raw = line_bytes
        if raw.startswith(_BOM):  # Windows tools write one; json.loads refuses it
            raw = raw[len(_BOM) :]
            counts["utf8_bom_lines"] += 1
        if not raw.strip():
            continue
        if limit is not None and rows >= limit:
            break
        record, bad_unicode = _parse_line(raw, lineno, where)
        rows += 1
        if rows <= _SAMPLE_ROWS:
            seen_paths.update(_key_paths(record))
        doc_id = _value(record, fields.id, "id", missing, counts)
        id_json.append(_typed_id(record, fields.id, doc_id))
        text = _value(record, fields.text, "text", missing, counts)
        url = "" if url_path is None else _value(record, url_path, "url", missing, counts)
        if b"\\u" in raw and _SURROGATE_ESCAPE.search(raw):
            (text, bad_text), (url, bad_url) = _no_surrogates(text), _no_surrogates(url)
            doc_id, bad_id = _no_surrogates(doc_id) if doc_id is not None else (None, False)
            bad_unicode = bad_unicode or bad_text or bad_url or bad_id
        if bad_unicode:
            counts["invalid_utf8_lines"] += 1
        ids.append(doc_id)
        texts.append(text)
        urls.append(url)
    for role, path in fields.wanted().items():
        if rows and missing[role] == rows:
            raise absent_field_error(where, role, path, rows, seen_paths)
        if missing[role]:
            counts[f"missing_{role}"] = missing[role]
    typed = id_json if any(j is not None for j in id_json) else None
    return Documents(ids=ids, texts=texts, urls=urls, counts=counts, id_json=typed)


def _typed_id(record: dict[str, Any], path: str, doc_id: str | None) -> str | None:
    """The JSON text of an id that is a number (or another non-string), else None."""
    if doc_id is None:
        return None
    value = _lookup(record, path)
    return None if isinstance(value, str) else json.dumps(value)
