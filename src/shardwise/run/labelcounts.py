"""Per-file label counts (the stats' ``label_counts``), pure and vectorised.

So that the domain distribution is never rebuilt from the sidecars, each file's stats
keep ``{format_version, docs, text_bytes, [tokens], classifiers: {name: {label: cell}},
pairs: {"a,b": {label a: {label b: cell}}}}``; a cell is ``[documents, UTF-8 text bytes]``
(``, tokens]`` with ``domains.tokenizer``); only non-zero cells are written.
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import ModelError

FORMAT_VERSION = 1

Pair = tuple[str, str]


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
) -> dict[str, Any]:
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
    out = {
        "format_version": FORMAT_VERSION,
        "docs": int(nbytes.size),
        "text_bytes": int(nbytes.sum()),
        "classifiers": singles,
        "pairs": joint,
    }
    if tokens is not None:
        out["tokens"] = int(np.asarray(tokens, dtype=np.int64).sum())
    return out


def _plus(a: Sequence[int], b: Sequence[int]) -> list[int]:
    """Two cells summed (``[docs, bytes]`` or ``[docs, bytes, tokens]``)."""
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


def add_counts(into: dict[str, Any] | None, more: Mapping[str, Any]) -> dict[str, Any]:
    """Sum two ``label_counts`` (the files of one task); returns the sum."""
    if into is None:
        return json.loads(json.dumps(more))
    for key in ("docs", "text_bytes", "tokens"):
        if key in into or key in more:
            into[key] = int(into.get(key, 0)) + int(more.get(key, 0))
    for name, cells in more.get("classifiers", {}).items():
        target = into.setdefault("classifiers", {}).setdefault(name, {})
        for label, cell in cells.items():
            target[label] = _plus(target.get(label, []), cell)
    for key, rows in more.get("pairs", {}).items():
        table = into.setdefault("pairs", {}).setdefault(key, {})
        for la, cols in rows.items():
            row = table.setdefault(la, {})
            for lb, cell in cols.items():
                row[lb] = _plus(row.get(lb, []), cell)
    return into


def compact_json(counts: Mapping[str, Any]) -> str:
    """``label_counts`` as one compact JSON line (hundreds of pair cells, indented, made
    the stats file ~20x larger)."""
    return json.dumps(counts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
