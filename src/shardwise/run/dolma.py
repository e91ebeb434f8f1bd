"""Dolma attributes: the labels as ``dolma mix`` reads them, from the sidecar alone.

Beside ``<root>/documents/<rel>``, ``<root>/attributes/<name>/<rel>`` (same compression),
one line per document: ``{"id", "attributes": {"<name>__<c>__label", ...}}``. dolma 1.2.1
ignores a **missing file in silence** and compares ids by JSON type: verify checks each.
"""

import gzip
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import pyarrow as pa
import zstandard

from shardwise.errors import RecordError
from shardwise.run import sidecar
from shardwise.run.reader import file_format
from shardwise.run.record import load_object

#: What each classifier's sidecar column becomes (column suffix -> attribute suffix).
_VALUES = (("_label", "label"), ("_label_id", "label_id"), ("_score", "prob"), ("_probs", "probs"))
_NOT_KEY = re.compile(r"[^A-Za-z0-9_]")


def key(name: str, classifier: str, what: str) -> str:
    """``<name>__<classifier>__<what>`` with every other character than ``[A-Za-z0-9_]``
    made ``_`` (what ``dolma tag`` does; a valid jq identifier)."""
    return _NOT_KEY.sub("_", f"{name}__{classifier}__{what}")


def applies(rel: str) -> bool:
    """Whether ``rel`` gets attributes: dolma mixes JSON Lines documents, never Parquet."""
    return file_format(rel) == "jsonl"


def classifiers_of(columns: Iterable[str]) -> list[str]:
    """The classifiers of a sidecar's columns, in column order."""
    return [c.removesuffix("_label_id") for c in columns if c.endswith("_label_id")]


def build(rel: str, ids: Sequence[str | None], columns: Mapping[str, pa.Array], name: str) -> bytes:
    """The attributes file of ``rel`` (compressed as ``rel`` is) from its label columns."""
    values: dict[str, list] = {}
    for c in classifiers_of(columns):
        for column, what in _VALUES:
            if c + column in columns:
                values[key(name, c, what)] = columns[c + column].to_pylist()
    return build_rows(rel, sidecar.typed_ids(ids, columns), values)


def build_rows(rel: str, ids: Sequence[Any], values: Mapping[str, list]) -> bytes:
    """An attributes file (compressed as ``rel`` is): per row its id and, per key of
    ``values``, that row's value."""
    items = list(values.items())
    lines = [
        json.dumps({"id": doc_id, "attributes": {k: v[i] for k, v in items}}) + "\n"
        for i, doc_id in enumerate(ids)
    ]
    return compress("".join(lines).encode("utf-8"), rel)


def compress(data: bytes, rel: str) -> bytes:
    """``data`` compressed as the extension of ``rel`` says (dolma infers it the same way)."""
    if rel.endswith(".gz"):
        return gzip.compress(data, compresslevel=6, mtime=0)
    if rel.endswith(".zst"):
        return zstandard.ZstdCompressor(level=3).compress(data)
    return data


def decompress(raw: bytes, rel: str) -> bytes:
    """The JSON Lines inside an attributes (or documents) file."""
    if rel.endswith(".gz"):
        return gzip.decompress(raw)
    if rel.endswith(".zst"):
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)) as reader:
            return reader.read()
    return raw


@dataclass(frozen=True)
class AttributesFile:
    """One attributes file as read back: each row's id, and the keys of its first row."""

    ids: tuple[Any, ...]
    keys: frozenset[str]

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> Self:
        """Parse one; RecordError naming the file and the line when it is not one."""
        try:
            text = decompress(raw, where).decode("utf-8")
        except (OSError, EOFError, ValueError, zstandard.ZstdError) as e:
            raise RecordError(where, f"cannot be decompressed: {e}") from e
        ids: list[Any] = []
        keys: frozenset[str] = frozenset()
        for lineno, line in enumerate(text.splitlines(), start=1):
            row = load_object(line, f"{where} line {lineno}")
            if not isinstance(row.get("attributes"), dict) or "id" not in row:
                raise RecordError(where, f"line {lineno} has no id and attributes object")
            ids.append(row["id"])
            if lineno == 1:
                keys = frozenset(row["attributes"])
        return cls(tuple(ids), keys)

    def problems(self, ids: list[Any] | None, classifiers: Sequence[str]) -> list[str]:
        """How this file disagrees with its documents' ids (in order) and the run's
        classifiers (dolma mix reads it row by row, by position)."""
        found = []
        if ids is not None and len(self.ids) != len(ids):
            rows = len(self.ids)
            then = "fail on it" if rows > len(ids) else "leave the rest unlabelled"
            found.append(f"has {rows} rows, the documents {len(ids)}: dolma mix would {then}")
        elif ids is not None and list(self.ids) != ids:
            first = next(i for i, (a, b) in enumerate(zip(self.ids, ids, strict=True)) if a != b)
            text = f"ids differ from the documents' at row {first}: {self.ids[first]!r} where "
            found.append(text + f"the documents have {ids[first]!r}")
        keys = self.keys
        missing = [c for c in classifiers if not any(k.endswith(f"__{c}__label") for k in keys)]
        if self.ids and missing:
            found.append(f"no label of classifier(s) {', '.join(missing)}")
        return found
