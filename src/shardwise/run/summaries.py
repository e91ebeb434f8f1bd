"""``summaries/<shard>.arrow``: one small local file per finished shard, so that the
domain distribution never reads one object per source file.

Written by the shard job just before its marker, from the label counts of every file of
the shard (the progress journal carries those of files finished by earlier attempts: no
object is read back). One row per non-zero (task, view, cell), sorted by view; the schema
metadata says the labels, views, tasks and each view's rows (docs/ARCHITECTURE.md).
"""

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import numpy as np
import pyarrow as pa

from shardwise.errors import RecordError
from shardwise.run import journal, markers
from shardwise.run.filestats import FIGURES, FileStats
from shardwise.run.labelcounts import LabelCounts, pair_key
from shardwise.run.reader import arrow_owned
from shardwise.run.record import Fields
from shardwise.store.atomic import write_atomic

SUMMARIES_DIR = "summaries"
SUFFIX = ".arrow"
FORMAT_VERSION = 1
META_KEY = b"shardwise"
SCHEMA = pa.schema(
    [("task", pa.int32()), ("view", pa.int16()), ("a", pa.int16()), ("b", pa.int16()),
     ("docs", pa.int64()), ("bytes", pa.int64()), ("tokens", pa.int64())]
)  # fmt: skip

log = logging.getLogger("shardwise.run.summaries")
#: The integer figures of each task in the metadata's ``tasks``.
TASK_FIGURES = ("docs", "text_bytes", "tokens", "files")


@dataclass(frozen=True, kw_only=True)
class SummaryMeta:
    """The summary's schema metadata (``META_KEY``): the labels and pairs seen, the views
    and each view's rows, the complete tasks and the incomplete ones. ``tasks`` is read as
    columns (task ids, and per figure an int64 array): the domains view reads it for
    every shard, where a record per task would cost seconds at tens of thousands."""

    format_version: int = FORMAT_VERSION
    shard: int
    written_at: str = ""
    labels: dict[str, tuple[str, ...]]
    pairs: tuple[tuple[str, str], ...]
    views: tuple[str, ...]
    task_ids: tuple[str, ...]
    task_figures: dict[str, np.ndarray]  # TASK_FIGURES -> int64 per task
    tokens_counted: bool = False
    incomplete_tasks: tuple[str, ...] = ()
    view_rows: tuple[tuple[int, int], ...]
    #: Files whose labels are not the run's (``outputs.stats_problems``: another model or
    #: set-up than run.json pins), and why: not counted, their tasks incomplete.
    rejected_files: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        """The metadata's bytes (``tasks`` as one object per task)."""
        figures = {k: v.tolist() for k, v in self.task_figures.items()}
        tasks = [
            {"task_id": task_id, **{k: figures[k][i] for k in TASK_FIGURES}}
            for i, task_id in enumerate(self.task_ids)
        ]
        data = {f: getattr(self, f) for f in _META_FIELDS}
        return json.dumps({**data, "tasks": tasks}).encode()

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """The metadata; RecordError naming ``where`` and the field otherwise."""
        f = Fields.parse(raw, where)
        tasks = f.list("tasks")
        if not all(type(t) is dict for t in tasks):
            raise f.refuse("tasks", "must be an array of objects")
        labels = f.dict("labels")
        for name, names in labels.items():
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise RecordError(
                    f"{where} [labels]", f"field {name!r} must be an array of strings"
                )
        return f.into(
            cls,
            labels={name: tuple(names) for name, names in labels.items()},
            pairs=tuple(_pairs(f, "pairs", str)),
            task_ids=tuple(_task_ids(tasks, f)),
            task_figures={k: _column(tasks, k, f) for k in TASK_FIGURES},
            view_rows=tuple(_pairs(f, "view_rows", int)),
        )


#: The metadata's keys as they are written: the record's fields but the task columns
#: (written as ``tasks``, one object per task).
_META_FIELDS = tuple(
    f.name for f in dataclasses.fields(SummaryMeta) if f.name not in ("task_ids", "task_figures")
)


def _pairs(f: Fields, key: str, kind: type) -> list[tuple[Any, Any]]:
    """An array of two-item arrays of ``kind``."""
    values = f.list(key)
    if not all(
        type(v) is list and len(v) == 2 and type(v[0]) is kind and type(v[1]) is kind
        for v in values
    ):
        raise f.refuse(key, f"must be an array of pairs of {kind.__name__}, got {values!r}")
    return [(a, b) for a, b in values]


def _task_ids(tasks: list[dict[str, Any]], f: Fields) -> list[str]:
    """Every task's id (checked in one pass: tens of thousands of shards are read)."""
    ids = [t.get("task_id") for t in tasks]
    if not all(type(i) is str for i in ids):
        raise f.refuse("tasks", "entries' 'task_id' must be strings")
    return ids


def _column(tasks: list[dict[str, Any]], key: str, f: Fields) -> np.ndarray:
    """One figure of every task as int64 (absent: 0, as in summaries written before it)."""
    values = [t.get(key, 0) for t in tasks]
    if not all(type(v) is int and v >= 0 for v in values):
        raise f.refuse("tasks", f"entries' {key!r} must be counts >= 0")
    return np.array(values, np.int64)


def summary_path(run_dir: Path, shard: int) -> Path:
    """Where the summary of ``shard`` lives."""
    return Path(run_dir) / SUMMARIES_DIR / f"{shard}{SUFFIX}"


def summarized_shards(run_dir: Path) -> set[int]:
    """Shards with a summary (one listing)."""
    return markers.numbered(Path(run_dir) / SUMMARIES_DIR, SUFFIX)


def _task_totals(
    tasks: Sequence[tuple[str, Sequence[str]]], counts: Mapping[str, LabelCounts]
) -> tuple[list[tuple[str, LabelCounts, int]], list[str]]:
    """Each task whose every file has counts, with their sum and its file count; and the
    ids of the tasks with a file without counts (not labelled, for the estimate)."""
    complete: list[tuple[str, LabelCounts, int]] = []
    incomplete: list[str] = []
    for task_id, files in tasks:
        if not files or any(f not in counts for f in files):
            incomplete.append(task_id)
            continue
        complete.append((task_id, LabelCounts.total(counts[f] for f in files), len(files)))
    return complete, incomplete


def build(
    shard: int,
    tasks: Sequence[tuple[str, Sequence[str]]],
    counts: Mapping[str, LabelCounts],
    rejected: Mapping[str, str] | None = None,
) -> bytes:
    """The summary of ``shard`` as Arrow IPC bytes (pure): ``tasks`` are (task id, its
    files); ``counts`` a file's ``label_counts`` (one without makes its task incomplete);
    ``rejected`` the files left uncounted as not the run's labels, and why."""
    complete, incomplete = _task_totals(tasks, counts)
    totals = [total for _, total, _ in complete]
    labels, pairs = _labels_and_pairs(totals)
    names = sorted(labels)
    views = [*names, *(pair_key(p) for p in pairs)]
    cols = _cell_rows(totals, labels, views)
    # Sorted by view, so that a reader takes one view as one slice of each file.
    table = pa.table(
        {name: pa.array(cols[name], SCHEMA.field(name).type) for name in SCHEMA.names},
        schema=SCHEMA,
    ).sort_by(
        [("view", "ascending"), ("task", "ascending"), ("a", "ascending"), ("b", "ascending")]
    )
    bounds = np.searchsorted(table.column("view").to_numpy(), np.arange(len(views) + 1)).tolist()
    meta = SummaryMeta(
        shard=shard,
        written_at=datetime.now(UTC).isoformat(timespec="seconds"),
        labels={name: tuple(labels[name]) for name in names},
        pairs=tuple(pairs),
        views=tuple(views),
        task_ids=tuple(task_id for task_id, _, _ in complete),
        task_figures=_task_figures(complete),
        tokens_counted=bool(complete) and all(t.tokens is not None for t in totals),
        incomplete_tasks=tuple(incomplete),
        view_rows=tuple((bounds[i], bounds[i + 1]) for i in range(len(views))),
        rejected_files=dict(rejected or {}),
    )
    table = table.replace_schema_metadata({META_KEY: meta.to_json()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _labels_and_pairs(
    totals: Sequence[LabelCounts],
) -> tuple[dict[str, dict[str, int]], list[tuple[str, str]]]:
    """Each classifier's labels seen in the tasks (sorted: the same counts give the same
    file, whatever their dict order) with their index, and the pairs in first-seen order."""
    seen: dict[str, set[str]] = {}
    pairs: list[tuple[str, str]] = []
    for total in totals:
        for name, cells in total.classifiers.items():
            seen.setdefault(name, set()).update(cells)
        for key, table in total.pairs.items():
            a, _, b = key.partition(",")
            if (a, b) not in pairs:
                pairs.append((a, b))
            seen.setdefault(a, set()).update(table)
            seen.setdefault(b, set()).update(lb for row in table.values() for lb in row)
    labels = {name: {label: i for i, label in enumerate(sorted(v))} for name, v in seen.items()}
    return labels, pairs


def _cell_rows(
    totals: Sequence[LabelCounts], labels: Mapping[str, Mapping[str, int]], views: list[str]
) -> dict[str, list[int]]:
    """The table's columns: one row per (task, view, label or pair of labels) counted."""
    view_of = {v: i for i, v in enumerate(views)}
    cols: dict[str, list[int]] = {name: [] for name in SCHEMA.names}

    def row(task: int, view: int, a: int, b: int, cell: Sequence[int]) -> None:
        tokens = int(cell[2]) if len(cell) > 2 else 0
        values = (task, view, a, b, int(cell[0]), int(cell[1]), tokens)
        for name, value in zip(SCHEMA.names, values, strict=True):
            cols[name].append(value)

    for t, total in enumerate(totals):
        for name, cells in total.classifiers.items():
            for label, cell in cells.items():
                row(t, view_of[name], labels[name][label], -1, cell)
        for key, table in total.pairs.items():
            a, _, b = key.partition(",")
            for la, cols_b in table.items():
                for lb, cell in cols_b.items():
                    row(t, view_of[key], labels[a][la], labels[b][lb], cell)
    return cols


def _task_figures(complete: Sequence[tuple[str, LabelCounts, int]]) -> dict[str, np.ndarray]:
    """The metadata's per-task figures (``TASK_FIGURES``) of the complete tasks."""
    rows = [(t.docs, t.text_bytes, t.tokens or 0, files) for _, t, files in complete]
    table = np.array(rows, np.int64).reshape(len(rows), len(TASK_FIGURES))
    return {key: table[:, i].copy() for i, key in enumerate(TASK_FIGURES)}


@dataclass(frozen=True, eq=False, kw_only=True)
class Summary:
    """One shard's summary, as read back."""

    shard: int
    labels: dict[str, list[str]]
    pairs: list[tuple[str, str]]
    views: list[str]
    task_ids: list[str]
    task_docs: np.ndarray  # int64
    task_bytes: np.ndarray  # int64 (UTF-8 text bytes)
    incomplete_tasks: list[str]
    cells: pa.Table
    view_rows: list[tuple[int, int]]  # per view, its [start, stop) rows in ``cells``
    task_tokens: np.ndarray | None = None  # int64; None: tokens not counted
    rejected_files: dict[str, str] = field(default_factory=dict)  # SummaryMeta's

    def view_cells(self, view: str) -> pa.Table:
        """The rows of one view (a zero-copy slice)."""
        start, stop = self.view_rows[self.views.index(view)]
        return self.cells.slice(start, stop - start)


def parse(data: bytes | pa.Buffer | pa.NativeFile, where: str = "summary") -> Summary:
    """Read a summary (bytes or an open file); ValueError naming ``where`` if not one."""
    try:
        source = pa.BufferReader(arrow_owned(data)) if isinstance(data, bytes) else data
        reader = pa.ipc.open_file(source)
        table = reader.read_all()
        raw = (table.schema.metadata or {}).get(META_KEY)
        if raw is None:
            raise ValueError("no shardwise metadata")
        meta = SummaryMeta.from_json(raw, where)
        counted = meta.tokens_counted and "tokens" in table.column_names
        return Summary(
            shard=meta.shard,
            labels={k: list(v) for k, v in meta.labels.items()},
            pairs=list(meta.pairs),
            views=list(meta.views),
            task_ids=list(meta.task_ids),
            task_docs=meta.task_figures["docs"],
            task_bytes=meta.task_figures["text_bytes"],
            incomplete_tasks=list(meta.incomplete_tasks),
            cells=table,
            view_rows=list(meta.view_rows),
            task_tokens=meta.task_figures["tokens"] if counted else None,
            rejected_files=dict(meta.rejected_files),
        )
    except (pa.ArrowInvalid, OSError, ValueError) as e:  # RecordError is a ValueError
        raise ValueError(f"{where} is not a shardwise summary: {e}") from e


def read(run_dir: Path, shard: int) -> Summary:
    """Read the summary of ``shard`` (memory-mapped: only the columns used are paged in)."""
    path = os.path.join(run_dir, SUMMARIES_DIR, f"{shard}{SUFFIX}")  # noqa: PTH118 - hot loop
    return parse(pa.memory_map(path), path)


def label_sets(got: Iterable[Summary]) -> dict[str, set[str]]:
    """Every label each classifier gave in the summaries ``got``."""
    seen: dict[str, set[str]] = {}
    for summary in got:
        for name, labels in summary.labels.items():
            seen.setdefault(name, set()).update(labels)
    return seen


def read_many(run_dir: Path, shards: Iterable[int]) -> tuple[list[Summary], list[int]]:
    """The summaries of ``shards`` that exist and parse; and the shards whose don't."""
    got: list[Summary] = []
    missing: list[int] = []
    for shard in shards:
        try:
            got.append(read(run_dir, shard))
        except (OSError, ValueError):
            missing.append(shard)
    return got, missing


def write_for_shard(
    run_dir: Path,
    shard: int,
    files: Sequence[tuple[str, str]],
    read_stats: Callable[[str], bytes],
    rejects: Callable[[str, FileStats], list[str]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Write ``summaries/<shard>.arrow`` for a shard whose files (file, task id) are all done
    (``read_stats`` only for files the journal does not cover: labelled by another job,
    whose stats ``rejects`` checks against the run's pins); each file's ``FIGURES`` for the
    shard marker. Never raises: the labels are done, a missing summary is said."""
    rows: dict[str, dict[str, Any]] = {}
    try:
        journal_lines = journal.entries(run_dir, shard)
        counts: dict[str, LabelCounts] = {}
        rejected: dict[str, str] = {}
        for rel, _ in files:
            entry = journal_lines.get(rel)
            if entry is None or entry.label_counts is None:
                try:
                    stats = FileStats.from_json(read_stats(rel), rel)
                except (OSError, ValueError) as e:
                    log.warning("shard %s: no label counts for %s (%s)", shard, rel, e)
                    continue
                found = rejects(rel, stats) if rejects is not None else []
                if found:
                    rejected[rel] = "; ".join(found)
                    log.warning("shard %s: %s not counted: %s", shard, rel, rejected[rel])
                    continue
                entry = journal.Line.of(rel, stats.docs or 0, stats)
            if entry.label_counts is not None:
                counts[rel] = entry.label_counts
            if entry.stats is not None:
                rows[rel] = {k: entry.stats.get(k) for k in FIGURES}
        by_task: dict[str, list[str]] = {}
        for rel, task_id in files:
            by_task.setdefault(task_id, []).append(rel)
        summary = build(shard, list(by_task.items()), counts, rejected)
        write_atomic(summary_path(run_dir, shard), summary)
    except Exception as e:  # noqa: BLE001 - bookkeeping must never fail a finished shard
        log.warning("shard %s: summary not written (%s: %s)", shard, type(e).__name__, e)
    return rows
