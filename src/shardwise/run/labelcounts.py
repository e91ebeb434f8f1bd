"""Per-file label counts (the stats' ``label_counts``), pure and vectorised.

So that the domain distribution is never rebuilt from the sidecars, each file's stats
keep ``{format_version, docs, text_bytes, [tokens], classifiers: {name: {label: cell}},
pairs: {"a,b": {label a: {label b: cell}}}}``; a cell is ``[documents, UTF-8 text bytes]``
(``, tokens]`` with ``domains.tokenizer``); only non-zero cells are written.
"""

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import ModelError
from shardwise.run.record import Fields

FORMAT_VERSION = 1

Pair = tuple[str, str]
#: ``[documents, UTF-8 text bytes]``, or ``[documents, bytes, tokens]`` when counted.
Cell = list[int]


@dataclass(frozen=True, kw_only=True)
class LabelCounts:
    """One file's (or task's) ``label_counts`` (module docstring): per classifier, label
    -> cell; per pair (``"a,b"``), label of a -> label of b -> cell; non-zero cells only.
    ``tokens``: None where the run counts none."""

    format_version: int = FORMAT_VERSION
    docs: int = 0
    text_bytes: int = 0
    tokens: int | None = None
    classifiers: dict[str, dict[str, Cell]] = field(default_factory=dict)
    pairs: dict[str, dict[str, dict[str, Cell]]] = field(default_factory=dict)

    @classmethod
    def total(cls, parts: Iterable["LabelCounts"]) -> Self:
        """The sum of several files' counts (the files of one task), cell by cell."""
        parts = list(parts)
        singles: dict[str, dict[str, Cell]] = {}
        joint: dict[str, dict[str, dict[str, Cell]]] = {}
        for part in parts:
            for name, cells in part.classifiers.items():
                _add_cells(singles.setdefault(name, {}), cells)
            for key, rows in part.pairs.items():
                table = joint.setdefault(key, {})
                for la, cols in rows.items():
                    _add_cells(table.setdefault(la, {}), cols)
        tokens = [p.tokens for p in parts if p.tokens is not None]
        return cls(
            docs=sum(p.docs for p in parts),
            text_bytes=sum(p.text_bytes for p in parts),
            tokens=sum(tokens) if tokens else None,
            classifiers=singles,
            pairs=joint,
        )

    def to_json(self) -> dict[str, Any]:
        """As the stats and the journal write it (no ``tokens`` where none are counted)."""
        data = dataclasses.asdict(self)
        if self.tokens is None:
            del data["tokens"]
        return data

    @classmethod
    def from_json(cls, data: Any, where: str) -> Self:
        """The counts as a file records them; RecordError naming ``where`` otherwise."""
        return Fields.of(data, where).into(cls)


def _add_cells(into: dict[str, Cell], more: Mapping[str, Cell]) -> None:
    """Add ``more``'s cells to ``into``'s, label by label."""
    for label, cell in more.items():
        into[label] = _plus(into.get(label, []), cell)


def pair_key(pair: Sequence[str]) -> str:
    """``"topic,format"``: how a pair is named in stats, summaries and ``--pair``."""
    return f"{pair[0]},{pair[1]}"


def text_bytes(texts: Sequence[str] | pa.Array) -> np.ndarray:
    """UTF-8 byte length of each text (int64), without encoding in Python."""
    arr = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.large_string())
    if len(arr) == 0:
        return np.zeros(0, np.int64)
    lengths = pc.binary_length(arr).fill_null(0)
    return lengths.to_numpy(zero_copy_only=False).astype(np.int64)


def _ids_and_names(columns: Mapping[str, pa.Array], name: str) -> tuple[np.ndarray, list[str]]:
    """Label ids of classifier ``name`` and the label name of each id seen (by id)."""
    ids_col = columns.get(f"{name}_label_id")
    names_col = columns.get(f"{name}_label")
    if ids_col is None or names_col is None:
        msg = f"no {name}_label_id / {name}_label column to count labels of classifier {name}"
        raise ModelError(msg)
    ids = np.asarray(pa.array(ids_col).to_numpy(zero_copy_only=False), dtype=np.int64)
    if ids.size and ids.min() < 0:
        raise ModelError(f"{name}_label_id holds a negative id ({int(ids.min())})")
    size = int(ids.max()) + 1 if ids.size else 0
    first = np.full(size, -1, np.int64)
    seen, where = np.unique(ids, return_index=True)
    first[seen] = where
    labels = pa.array(names_col)
    out = [""] * size
    for label_id, row in zip(seen.tolist(), first[seen].tolist(), strict=True):
        out[label_id] = str(labels[row].as_py())
    return ids, out


def _cells(keys: np.ndarray, weights: list[np.ndarray], size: int) -> tuple[np.ndarray, ...]:
    """Non-zero cells, their documents, and each weight's sum per cell (rounded)."""
    docs = np.bincount(keys, minlength=size)
    nonzero = np.flatnonzero(docs)
    sums = [
        np.rint(np.bincount(keys, weights=w, minlength=size)[nonzero]).astype(np.int64)
        for w in weights
    ]
    return nonzero, np.stack([docs[nonzero], *sums], axis=1)


def count_labels(
    columns: Mapping[str, pa.Array],
    nbytes: np.ndarray,
    classifiers: Sequence[str],
    pairs: Sequence[Pair] = (),
    tokens: np.ndarray | None = None,
) -> LabelCounts:
    """The ``label_counts`` of one file, from the sidecar's ``<name>_label_id`` and
    ``<name>_label`` columns, row-aligned with ``nbytes`` (and ``tokens`` when counted)."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    weights = [nbytes] + ([np.asarray(tokens, dtype=np.float64)] if tokens is not None else [])
    ids = {name: _ids_and_names(columns, name) for name in classifiers}
    for name, (label_ids, _) in ids.items():
        if label_ids.size != nbytes.size:
            raise ModelError(f"{name}: {label_ids.size} labels for {nbytes.size} texts")
    singles: dict[str, dict[str, list[int]]] = {}
    for name, (label_ids, names) in ids.items():
        cells, sums = _cells(label_ids, weights, len(names))
        singles[name] = {
            names[c]: row for c, row in zip(cells.tolist(), sums.tolist(), strict=True)
        }
    joint: dict[str, dict[str, dict[str, list[int]]]] = {}
    for a, b in pairs:
        (ia, na), (ib, nb) = ids[a], ids[b]
        width = max(len(nb), 1)
        cells, sums = _cells(ia * width + ib, weights, len(na) * width)
        table: dict[str, dict[str, list[int]]] = {}
        for c, row in zip(cells.tolist(), sums.tolist(), strict=True):
            table.setdefault(na[c // width], {})[nb[c % width]] = row
        joint[pair_key((a, b))] = table
    return LabelCounts(
        docs=int(nbytes.size),
        text_bytes=int(nbytes.sum()),
        tokens=None if tokens is None else int(np.asarray(tokens, dtype=np.int64).sum()),
        classifiers=singles,
        pairs=joint,
    )


def _plus(a: Sequence[int], b: Sequence[int]) -> list[int]:
    """Two cells summed (``[docs, bytes]`` or ``[docs, bytes, tokens]``)."""
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


def compact_json(counts: Mapping[str, Any]) -> str:
    """``label_counts`` as one compact JSON line (hundreds of pair cells, indented, made
    the stats file ~20x larger)."""
    return json.dumps(counts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
