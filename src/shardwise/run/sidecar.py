"""The labels-only sidecar and the per-file stats: names and layout, in one place.

For a source file ``<rel>`` under the input root, the output root receives
``<rel>.labels.parquet`` (row-aligned with the input: same order, same count; the
document id, then per classifier ``<name>_label``, ``<name>_label_id``,
``<name>_score`` and, when asked, ``<name>_probs``) and ``<rel>.stats.json``.
The ``.done`` marker (see ``markers``) is written after both.
"""

from __future__ import annotations

import json
import os
import platform
import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.errors import InputError
from shardwise.run.labelcounts import compact_json
from shardwise.store.atomic import json_bytes

SIDECAR_SUFFIX = ".labels.parquet"
STATS_SUFFIX = ".stats.json"
#: Packages whose versions go into every stats file (reproducibility).
VERSIONED = ("shardwise", "torch", "transformers", "tokenizers", "pyarrow")


def sidecar_rel(rel: str) -> str:
    """Relative path of the sidecar of source file ``rel``."""
    return rel + SIDECAR_SUFFIX


def stats_rel(rel: str) -> str:
    """Relative path of the stats file of source file ``rel``."""
    return rel + STATS_SUFFIX


def build_table(ids: list[str | None], columns: dict[str, pa.Array]) -> pa.Table:
    """The sidecar table; refuses label columns whose length differs from the ids'."""
    for name, col in columns.items():
        if len(col) != len(ids):
            msg = f"label column {name} has {len(col)} rows for {len(ids)} documents"
            raise InputError(msg)
    return pa.table({"id": pa.array(ids, pa.string()), **columns})


def label_columns(
    name: str, probs: np.ndarray, labels: Sequence[str], with_probs: bool
) -> dict[str, pa.Array]:
    """One classifier's sidecar columns from its probabilities (documents x labels).

    ``<name>_label`` (string), ``<name>_label_id`` (int32, the argmax), ``<name>_score``
    (float32, its probability) and, with ``with_probs``, ``<name>_probs`` (list<float16>).
    """
    label_ids = probs.argmax(axis=1).astype(np.int32)
    scores = probs[np.arange(len(probs)), label_ids].astype(np.float32)
    names = pa.array(list(labels), type=pa.string())
    columns = {
        f"{name}_label": names.take(pa.array(label_ids, type=pa.int32())),
        f"{name}_label_id": pa.array(label_ids, type=pa.int32()),
        f"{name}_score": pa.array(scores, type=pa.float32()),
    }
    if with_probs:
        flat = pa.array(probs.astype(np.float16).reshape(-1), type=pa.float16())
        offsets = pa.array(
            np.arange(len(probs) + 1, dtype=np.int32) * probs.shape[1], type=pa.int32()
        )
        columns[f"{name}_probs"] = pa.ListArray.from_arrays(offsets, flat)
    return columns


def to_parquet_bytes(table: pa.Table) -> bytes:
    """Serialise a sidecar (zstd; small row groups are pointless for label columns)."""
    sink = pa.BufferOutputStream()  # Arrow's own buffer: no Python file for its threads
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def read_sidecar(data: bytes) -> pa.Table:
    """Parse sidecar bytes."""
    return pq.read_table(pa.BufferReader(data))  # no Python file for Arrow's threads


def versions() -> dict[str, str]:
    """Installed versions of the packages that decide the labels."""
    out = {}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def build_stats(
    *,
    rel: str,
    task_id: str,
    shard: int,
    size: int,
    docs: int,
    seconds: float,
    timings: dict[str, float],
    engine_stats: dict[str, Any],
    device: str,
    device_name: str,
    dtype: str,
    counts: dict[str, int],
    models: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``.stats.json`` content for one labelled file.

    ``tokens`` (and so ``tokens_per_s``) counts real, unpadded tokens of every
    classifier's input, summed over the classifiers (four classifiers: each document's
    tokens four times). Two rates, one meaning each: ``tokens_per_s`` is tokens per
    second of the file's whole time (read to write: what the walltime and the ETA use);
    ``engine.infer_tokens_per_s`` is the same tokens per second of inference alone (the
    device's speed, several times higher).
    """
    tokens = int(engine_stats.get("tokens", 0))
    return {
        "file": rel,
        "task_id": task_id,
        "shard": shard,
        "bytes": size,
        "docs": docs,
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "docs_per_s": round(docs / seconds, 3) if seconds > 0 else None,
        "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None,
        "timings": {k: round(v, 4) for k, v in timings.items()},
        "engine": engine_stats,
        "tokens_counted": "real (unpadded) tokens of each classifier's input, summed over "
        "classifiers; tokens_per_s: per second of the file's whole time (read to write); "
        "engine.infer_tokens_per_s: per second of inference alone",
        "counts": dict(counts),
        "truncated_docs": int(engine_stats.get("truncated_docs", 0)),
        # per classifier: docs labelled from fp32, the expected number of the others that
        # differ from fp32 and its 95% bound (classify/recheck.py fidelity())
        "fidelity": list(engine_stats.get("fidelity", [])),
        "models": models or {},
        "device": device,
        "device_name": device_name,
        "dtype": dtype,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "versions": versions(),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def stats_bytes(stats: dict[str, Any]) -> bytes:
    """Serialise stats: indented, except ``label_counts``, which is one compact line.

    ``label_counts`` (see ``labelcounts``) holds hundreds of cells for a large file;
    indented it would be most of the file and slow every reader of the stats.
    """
    counts = stats.get("label_counts")
    if counts is None:
        return json_bytes(stats)
    head = json_bytes({k: v for k, v in stats.items() if k != "label_counts"}).decode("utf-8")
    body = head.rstrip().removesuffix("}").rstrip()
    sep = "," if body != "{" else ""
    return f'{body}{sep}\n  "label_counts": {compact_json(counts)}\n}}\n'.encode()


def parse_stats(data: bytes, where: str) -> dict[str, Any]:
    """Parse a stats file; InputError naming it when it is not JSON."""
    try:
        return json.loads(data)
    except ValueError as e:
        msg = f"{where}: stats file is not valid JSON: {e}"
        raise InputError(msg) from e
