"""The labels-only sidecar ``<rel>.labels.parquet``: its columns, bytes and checks.

Row-aligned with the input: ``id``, then per classifier ``<name>_label``, ``_label_id``,
``_score`` (and ``_probs`` when asked); with ``domains.tokenizer``, ``tokens``.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardwise.errors import InputError, RecordError
from shardwise.run.reader import arrow_owned, json_ids

SUFFIX = ".labels.parquet"
#: Columns every classifier contributes to a sidecar (``_probs`` is optional).
CLASSIFIER_COLUMNS = ("_label", "_label_id", "_score")
#: Each document's tokens in the training tokenizer (runs with ``domains.tokenizer``).
TOKENS = "tokens"
#: Per row, the JSON text of an id that the input wrote as a number (null for a string
#: id); only in the sidecar of a file with such ids, so its attributes keep their type.
ID_JSON = "id_json"


def typed_ids(ids: Sequence[str | None], columns: Mapping[str, pa.Array]) -> list[Any]:
    """The ids as the input's JSON wrote them, from a sidecar's ``id`` and ``id_json``."""
    found = columns.get(ID_JSON)
    return json_ids(ids, None if found is None else found.to_pylist())


#: The sidecar's schema metadata keys of the campaign site and lease epoch that wrote it.
SITE_KEY, EPOCH_KEY = b"shardwise.site", b"shardwise.lease_epoch"


def build_table(
    ids: list[str | None],
    columns: dict[str, pa.Array],
    holder: tuple[str, int] | None = None,
) -> pa.Table:
    """The sidecar table (``holder``: the campaign site and lease epoch writing it, kept in
    its schema metadata); refuses label columns whose length differs from the ids'."""
    for name, col in columns.items():
        if len(col) != len(ids):
            raise InputError(f"label column {name} has {len(col)} rows for {len(ids)} documents")
    table = pa.table({"id": pa.array(ids, pa.string()), **columns})
    if holder is None:
        return table
    return table.replace_schema_metadata({SITE_KEY: holder[0], EPOCH_KEY: str(holder[1])})


def holder_of(table: pa.Table) -> tuple[str, int] | None:
    """The campaign site and lease epoch that wrote a sidecar (None: not recorded)."""
    meta = table.schema.metadata or {}
    site, epoch = meta.get(SITE_KEY), meta.get(EPOCH_KEY)
    if site is None or epoch is None or not epoch.isdigit():
        return None
    return site.decode("utf-8", "replace"), int(epoch)


def label_columns(
    name: str, probs: np.ndarray, labels: Sequence[str], with_probs: bool
) -> dict[str, pa.Array]:
    """One classifier's sidecar columns from its probabilities (documents x labels): the
    argmax's name and id (int32), its probability (float32), every one (list<float16>)."""
    label_ids = probs.argmax(axis=1).astype(np.int32)
    scores = probs[np.arange(len(probs)), label_ids].astype(np.float32)
    names = pa.array(list(labels), type=pa.string())
    ids = pa.array(label_ids, type=pa.int32())
    columns = {
        f"{name}_label": names.take(ids),
        f"{name}_label_id": ids,
        f"{name}_score": pa.array(scores, type=pa.float32()),
    }
    if with_probs:
        flat = pa.array(probs.astype(np.float16).reshape(-1), type=pa.float16())
        offsets = pa.array(np.arange(len(probs) + 1, dtype=np.int32) * probs.shape[1], pa.int32())
        columns[f"{name}_probs"] = pa.ListArray.from_arrays(offsets, flat)
    return columns


def to_parquet_bytes(table: pa.Table) -> bytes:
    """Serialise a sidecar (zstd; small row groups are pointless for label columns)."""
    sink = pa.BufferOutputStream()  # Arrow's own buffer: no Python file for its threads
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def read_sidecar(data: bytes, where: str = "sidecar") -> pa.Table:
    """Parse sidecar bytes; RecordError naming ``where`` when they are not Parquet."""
    try:
        return pq.read_table(pa.BufferReader(arrow_owned(data)))
    except (pa.ArrowException, OSError) as e:
        raise RecordError(where, f"not a Parquet table: {type(e).__name__}: {e}") from e


def read_columns(
    data: bytes, columns: Sequence[str], where: str = "sidecar", optional: Sequence[str] = ()
) -> pa.Table:
    """Only ``columns`` (and those of ``optional`` it has) of a sidecar (Parquet reads no
    other); RecordError naming ``where`` and the columns it lacks."""
    try:
        schema = pq.read_schema(pa.BufferReader(arrow_owned(data)))
    except (pa.ArrowException, OSError) as e:
        raise RecordError(where, f"not a Parquet table: {type(e).__name__}: {e}") from e
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise RecordError(where, f"has no {', '.join(missing)} column(s)")
    wanted = [*columns, *(c for c in optional if c in schema.names)]
    return pq.read_table(pa.BufferReader(arrow_owned(data)), columns=wanted)


def problems(
    table: pa.Table,
    classifiers: Iterable[str],
    ids: list[str | None] | None,
    *,
    tokens: bool = False,
    id_json: list[str | None] | None = None,
) -> list[str]:
    """What is wrong with a sidecar: rows and ids against the input's (their JSON type
    too: ``id_json``), label columns, and (``tokens``: the run counts them) the token counts."""
    found: list[str] = []
    if ids is not None and table.num_rows == len(ids):
        found += _type_problem(table, ids, id_json)
    if tokens and TOKENS not in table.column_names:
        found.append(f"no {TOKENS} column (the run counts tokens: domains.tokenizer)")
    elif tokens and (table[TOKENS].null_count or not pa.types.is_integer(table[TOKENS].type)):
        found.append(f"{TOKENS} is {table[TOKENS].type} with {table[TOKENS].null_count} null(s)")
    if ids is not None and table.num_rows != len(ids):
        found.append(f"has {table.num_rows} rows, the input has {len(ids)}")
    if "id" not in table.column_names:
        found.append("no id column")
    elif ids is not None and table.num_rows == len(ids):
        got = table["id"].to_pylist()
        if got != ids:
            first = next(i for i, (a, b) in enumerate(zip(got, ids, strict=True)) if a != b)
            wrong = sum(1 for a, b in zip(got, ids, strict=True) if a != b)
            text = f"ids differ from the input's at {wrong} row(s); first at row {first}: "
            found.append(text + f"{got[first]!r} != {ids[first]!r}")
    for name in classifiers:
        found += _column_problems(table, name)
    return found


def _type_problem(
    table: pa.Table, ids: list[str | None], id_json: list[str | None] | None
) -> list[str]:
    """Whether the sidecar keeps the JSON type of the input's ids (a sidecar written
    before shardwise kept it does not; relabelling the file writes it)."""
    kept = table[ID_JSON].to_pylist() if ID_JSON in table.column_names else None
    if kept == id_json:
        return []
    want, got = json_ids(ids, id_json), json_ids(ids, kept)
    row = next((i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a != b), 0)
    text = f"keeps id {got[row]!r} at row {row} where the input has {want[row]!r} (JSON types "
    return [text + "differ): its Dolma attributes would not match the documents in dolma mix"]


def _column_problems(table: pa.Table, name: str) -> list[str]:
    """One classifier's columns: present, non-null, of their types, no NaN score."""
    found = []
    for suffix in CLASSIFIER_COLUMNS:
        column = name + suffix
        if column not in table.column_names:
            found.append(f"no {column} column")
            continue
        col = table[column]
        if col.null_count:
            found.append(f"{column} has {col.null_count} null(s)")
        if suffix == "_label" and not pa.types.is_string(col.type):
            found.append(f"{column} is {col.type}, not string")
        elif suffix == "_label_id" and not pa.types.is_integer(col.type):
            found.append(f"{column} is {col.type}, not an integer")
        elif suffix == "_score":
            if not pa.types.is_floating(col.type):
                found.append(f"{column} is {col.type}, not a float")
            elif (nans := pc.sum(pc.is_nan(col)).as_py() or 0) > 0:
                found.append(f"{column} has {nans} NaN(s)")
    probs = name + "_probs"
    if probs in table.column_names and table[probs].null_count:
        found.append(f"{probs} has {table[probs].null_count} null(s)")
    return found
