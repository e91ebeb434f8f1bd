"""Read one source file's documents: id, text and url, nothing else.

Parquet is read with column projection (only the top-level columns that hold the
three fields), JSONL (.jsonl, .jsonl.gz, .jsonl.zst) is streamed line by line. Field
names may be dotted paths into nested objects (``metadata.url``).

Policy for imperfect data (counted in ``Documents.counts`` and in the file's stats):
null or missing text -> labelled as empty text; non-string text -> ``str(value)``;
missing url -> empty url; invalid UTF-8 -> replaced with U+FFFD (raw bytes in a
JSONL line, ``\\ud800``-style escapes of lone surrogates, invalid bytes in a Parquet
string or binary column); duplicate ids are kept (the sidecar is row-aligned, not
keyed). A file that cannot be parsed at all (corrupt Parquet, truncated gzip or zstd,
a line that is not JSON) raises InputError naming the file and, for JSONL, the line.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardwise.errors import InputError
from shardwise.manifest import file_format
from shardwise.storage import Location


@dataclass(frozen=True)
class Fields:
    """Where the three values live in a record (dotted paths allowed)."""

    id: str = "id"
    text: str = "text"
    url: str = "url"


@dataclass
class Documents:
    """One file's documents in input order."""

    ids: list[str | None]
    texts: list[str]
    urls: list[str]
    counts: Counter[str] = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.texts)


def read_documents(loc: Location, rel: str, fields: Fields, fmt: str = "auto") -> Documents:
    """Read ``rel`` under ``loc``; raise InputError naming the file on any failure."""
    kind = file_format(rel) if fmt == "auto" else fmt
    try:
        with loc.open(rel) as fh:
            if kind == "parquet":
                docs = _read_parquet(fh, fields)
            elif kind == "jsonl":
                docs = _read_jsonl(_decompressed(fh, rel), fields, loc.url(rel))
            else:
                msg = f"{loc.url(rel)}: unsupported file type (want .parquet or .jsonl[.gz|.zst])"
                raise InputError(msg)
    except InputError:
        raise
    except FileNotFoundError as e:
        msg = f"{loc.url(rel)}: file not found (was it removed after planning?)"
        raise InputError(msg) from e
    except (OSError, EOFError, ValueError, pa.ArrowException) as e:
        msg = f"{loc.url(rel)}: cannot read {kind} file: {type(e).__name__}: {e}"
        raise InputError(msg) from e
    dupes = len(docs.ids) - len(set(docs.ids))
    if dupes:
        docs.counts["duplicate_ids"] = dupes
    return docs


# -- Parquet ------------------------------------------------------------------


def _read_parquet(fh: IO[bytes], fields: Fields) -> Documents:
    pf = pq.ParquetFile(fh)
    names = set(pf.schema_arrow.names)
    wanted = []
    for path in (fields.id, fields.text, fields.url):
        top = path.split(".", 1)[0]
        if top in names and top not in wanted:
            wanted.append(top)
    table = pf.read(columns=wanted)
    counts: Counter[str] = Counter()
    if fields.id.split(".", 1)[0] not in names:
        msg = f"no id field {fields.id!r} (columns: {sorted(names)})"
        raise InputError(msg)
    ids = _strings(_column(table, fields.id), keep_null=True, counts=counts)
    texts_raw = _column(table, fields.text)
    if texts_raw is None:
        counts["missing_text_field"] = table.num_rows
    texts = _strings(texts_raw, n=table.num_rows, counts=counts)
    urls = _strings(_column(table, fields.url), n=table.num_rows, counts=counts)
    counts["null_texts"] = texts_raw.null_count if texts_raw is not None else 0
    counts["null_ids"] = ids.count(None)
    return Documents(ids, texts, urls, +counts)


def _column(table: pa.Table, path: str) -> pa.ChunkedArray | None:
    top, *rest = path.split(".")
    if top not in table.column_names:
        return None
    col = table[top]
    for part in rest:
        if not pa.types.is_struct(col.type) or col.type.get_field_index(part) < 0:
            return None
        col = pc.struct_field(col, part)
    return col


def _strings(
    col: pa.ChunkedArray | None,
    n: int = 0,
    *,
    keep_null: bool = False,
    counts: Counter[str] | None = None,
) -> list:
    """A column as Python strings; invalid UTF-8 is replaced (and counted), not fatal.

    Parquet writers do not all validate UTF-8, and binary columns are common for text:
    one bad byte must not fail a whole file (the policy is "replace and count").
    """
    if col is None:
        return [None] * n if keep_null else [""] * n
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        values = _decode_replacing(col.to_pylist(), counts)
    else:
        if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
            col = pc.cast(col, pa.string())
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


# -- JSONL --------------------------------------------------------------------


def _decompressed(fh: IO[bytes], rel: str) -> IO[bytes]:
    if rel.endswith(".gz"):
        return gzip.GzipFile(fileobj=fh)
    if rel.endswith(".zst"):
        return _ZstdFrames(fh)  # type: ignore[return-value]
    return fh


class _ZstdFrames(io.RawIOBase):
    """Concatenated zstd frames as one stream; EOFError when the last frame is cut short.

    zstandard's ``stream_reader`` returns a clean EOF on a truncated frame, so a cut
    ``.jsonl.zst`` would be labelled with silently fewer rows (and ``verify``, which
    reads the same way, could not tell). gzip raises EOFError there; so does this.
    """

    def __init__(self, fh: IO[bytes], chunk_size: int = 1 << 20) -> None:
        import zstandard

        self._fh = fh
        self._chunk_size = chunk_size
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


def _get(record: dict[str, Any], path: str) -> Any:
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


#: A ``\\uD800``-``\\uDFFF`` escape: JSON may spell a lone surrogate, UTF-8 cannot hold one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_surrogates(value: str) -> tuple[str, bool]:
    """Replace lone surrogates (which would fail the tokenizer and Arrow) with U+FFFD."""
    fixed = _SURROGATE.sub("\ufffd", value)
    return fixed, fixed != value


def _read_jsonl(stream: IO[bytes], fields: Fields, where: str) -> Documents:
    ids: list[str | None] = []
    texts: list[str] = []
    urls: list[str] = []
    counts: Counter[str] = Counter()
    for lineno, raw in enumerate(_lines(stream), start=1):
        if not raw.strip():
            continue
        bad_unicode = False
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = raw.decode("utf-8", errors="replace")
            bad_unicode = True
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            msg = f"{where}: line {lineno} is not valid JSON: {e}"
            raise InputError(msg) from e
        if not isinstance(record, dict):
            msg = f"{where}: line {lineno} is a JSON {type(record).__name__}, not an object"
            raise InputError(msg)
        doc_id = _get(record, fields.id)
        doc_id = None if doc_id is None else str(doc_id)
        if doc_id is None:
            counts["null_ids"] += 1
        text = _get(record, fields.text)
        if text is None:
            counts["null_texts"] += 1
            text = ""
        elif not isinstance(text, str):
            counts["non_string_texts"] += 1
            text = str(text)
        url = _get(record, fields.url)
        url = "" if url is None else str(url)
        if b"\\u" in raw and _SURROGATE_ESCAPE.search(raw):
            text, bad_text = _no_surrogates(text)
            url, bad_url = _no_surrogates(url)
            bad_id = False
            if doc_id is not None:
                doc_id, bad_id = _no_surrogates(doc_id)
            bad_unicode = bad_unicode or bad_text or bad_url or bad_id
        if bad_unicode:
            counts["invalid_utf8_lines"] += 1
        ids.append(doc_id)
        texts.append(text)
        urls.append(url)
    return Documents(ids, texts, urls, counts)
