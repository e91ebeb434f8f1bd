"""JSON Lines, streamed: plain, gzip or zstd (concatenated frames too); dotted field
paths; rows that are not quite right labelled and counted, a file that is not JSON Lines
refused naming it."""

import gzip
import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import IO, Any

import zstandard

from shardwise.errors import InputError
from shardwise.run.fields import NULL_COUNTS, Documents, FieldPaths, absent_field_error

#: JSONL rows whose key paths are collected to list the fields a file does have.
_SAMPLE_ROWS = 200
#: How deep nested objects are listed in that message (``a.b.c``).
_LIST_DEPTH = 3
_BOM = b"\xef\xbb\xbf"


def decompressed(fh: IO[bytes], rel: str) -> IO[bytes]:
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
        counts[NULL_COUNTS[role]] += 1
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


def read_jsonl(
    stream: IO[bytes], fields: FieldPaths, where: str, limit: int | None = None
) -> Documents:
    """The documents of a JSONL stream; only the first ``limit`` rows when given (a sample)."""
    ids: list[str | None] = []
    id_json: list[str | None] = []
    texts: list[str] = []
    urls: list[str] = []
    counts, missing = Counter[str](), Counter[str]()
    seen_paths: set[str] = set()
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
        doc_id, typed, text, url = _row(record, raw, fields, missing, counts, bad_unicode)
        ids.append(doc_id)
        id_json.append(typed)
        texts.append(text)
        urls.append(url)
    for role, path in fields.wanted().items():
        if rows and missing[role] == rows:
            raise absent_field_error(where, role, path, rows, seen_paths)
        if missing[role]:
            counts[f"missing_{role}"] = missing[role]
    typed_ids = id_json if any(j is not None for j in id_json) else None
    return Documents(ids=ids, texts=texts, urls=urls, counts=counts, id_json=typed_ids)


def _row(
    record: dict[str, Any],
    raw: bytes,
    fields: FieldPaths,
    missing: Counter[str],
    counts: Counter[str],
    bad_unicode: bool,
) -> tuple[str | None, str | None, str, str]:
    """One record's id, its JSON text when it is no string, text and url; lone
    surrogates (escaped in the JSON) replaced and the line counted as invalid UTF-8."""
    doc_id = _value(record, fields.id, "id", missing, counts)
    typed = _typed_id(record, fields.id, doc_id)
    text = _value(record, fields.text, "text", missing, counts)
    url = "" if fields.url is None else _value(record, fields.url, "url", missing, counts)
    if b"\\u" in raw and _SURROGATE_ESCAPE.search(raw):
        (text, bad_text), (url, bad_url) = _no_surrogates(text), _no_surrogates(url)
        doc_id, bad_id = _no_surrogates(doc_id) if doc_id is not None else (None, False)
        bad_unicode = bad_unicode or bad_text or bad_url or bad_id
    if bad_unicode:
        counts["invalid_utf8_lines"] += 1
    return doc_id, typed, text, url


def _typed_id(record: dict[str, Any], path: str, doc_id: str | None) -> str | None:
    """The JSON text of an id that is a number (or another non-string), else None."""
    if doc_id is None:
        return None
    value = _lookup(record, path)
    return None if isinstance(value, str) else json.dumps(value)
