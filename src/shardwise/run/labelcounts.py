"""Per-file label counts: documents and text bytes per label and per label pair.

When a file is labelled, its ``.stats.json`` gains one key, ``label_counts``, so that the
corpus's domain distribution never has to be rebuilt from the sidecars:

.. code-block:: json

    {"format_version": 1, "docs": 3, "text_bytes": 9120,
     "classifiers": {"topic": {"Health": [2, 8000], "Travel": [1, 1120]}},
     "pairs": {"topic,format": {"Health": {"Listicle": [2, 8000]},
                                "Travel": {"Tutorial": [1, 1120]}}}}

Every cell is ``[documents, UTF-8 bytes of the text field as read]``; only non-zero
cells are written (sparse). Pairs are the config's ``domains.pairs``. Everything here
is pure and vectorised: a file may hold 100k documents.
"""

from __future__ import annotations

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
        msg = f"{name}_label_id holds a negative id ({int(ids.min())})"
        raise ModelError(msg)
    size = int(ids.max()) + 1 if ids.size else 0
    first = np.full(size, -1, np.int64)
    seen, where = np.unique(ids, return_index=True)
    first[seen] = where
    labels = pa.array(names_col)
    out = [""] * size
    for label_id, row in zip(seen.tolist(), first[seen].tolist(), strict=True):
        out[label_id] = str(labels[row].as_py())
    return ids, out


def _cells(keys: np.ndarray, nbytes: np.ndarray, size: int) -> tuple[np.ndarray, ...]:
    docs = np.bincount(keys, minlength=size)
    volume = np.bincount(keys, weights=nbytes, minlength=size)
    nonzero = np.flatnonzero(docs)
    return nonzero, docs[nonzero], np.rint(volume[nonzero]).astype(np.int64)


def count_labels(
    columns: Mapping[str, pa.Array],
    nbytes: np.ndarray,
    classifiers: Sequence[str],
    pairs: Sequence[Pair] = (),
) -> dict[str, Any]:
    """The ``label_counts`` of one file, from its label columns and text byte lengths.

    ``columns`` are the sidecar's ``<name>_label_id`` (int) and ``<name>_label`` (str)
    columns, row-aligned with ``nbytes`` (see :func:`text_bytes`).
    """
    nbytes = np.asarray(nbytes, dtype=np.float64)
    ids: dict[str, tuple[np.ndarray, list[str]]] = {
        name: _ids_and_names(columns, name) for name in classifiers
    }
    for name, (label_ids, _) in ids.items():
        if label_ids.size != nbytes.size:
            msg = f"{name}: {label_ids.size} labels for {nbytes.size} texts"
            raise ModelError(msg)
    singles: dict[str, dict[str, list[int]]] = {}
    for name, (label_ids, names) in ids.items():
        cells, docs, volume = _cells(label_ids, nbytes, len(names))
        singles[name] = {
            names[c]: [d, v]
            for c, d, v in zip(cells.tolist(), docs.tolist(), volume.tolist(), strict=True)
        }
    joint: dict[str, dict[str, dict[str, list[int]]]] = {}
    for a, b in pairs:
        (ia, na), (ib, nb) = ids[a], ids[b]
        width = max(len(nb), 1)
        cells, docs, volume = _cells(ia * width + ib, nbytes, len(na) * width)
        table: dict[str, dict[str, list[int]]] = {}
        for c, d, v in zip(cells.tolist(), docs.tolist(), volume.tolist(), strict=True):
            table.setdefault(na[c // width], {})[nb[c % width]] = [d, v]
        joint[pair_key((a, b))] = table
    return {
        "format_version": FORMAT_VERSION,
        "docs": int(nbytes.size),
        "text_bytes": int(nbytes.sum()),
        "classifiers": singles,
        "pairs": joint,
    }


def add_counts(into: dict[str, Any] | None, more: Mapping[str, Any]) -> dict[str, Any]:
    """Sum two ``label_counts`` (the files of one task); returns the sum."""
    if into is None:
        return json.loads(json.dumps(more))
    into["docs"] = int(into.get("docs", 0)) + int(more.get("docs", 0))
    into["text_bytes"] = int(into.get("text_bytes", 0)) + int(more.get("text_bytes", 0))
    for name, cells in more.get("classifiers", {}).items():
        target = into.setdefault("classifiers", {}).setdefault(name, {})
        for label, (d, v) in cells.items():
            old = target.get(label, [0, 0])
            target[label] = [old[0] + d, old[1] + v]
    for key, rows in more.get("pairs", {}).items():
        table = into.setdefault("pairs", {}).setdefault(key, {})
        for la, cols in rows.items():
            row = table.setdefault(la, {})
            for lb, (d, v) in cols.items():
                old = row.get(lb, [0, 0])
                row[lb] = [old[0] + d, old[1] + v]
    return into


def compact_json(counts: Mapping[str, Any]) -> str:
    """``label_counts`` as one compact JSON line.

    The pair tables of a large file hold hundreds of cells; indented, they would make
    the stats file ~20x larger (and every reader of the stats slower).
    """
    return json.dumps(counts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
