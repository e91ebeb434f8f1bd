"""The cached plan (``plan.parquet`` + ``plan.json``): every source file with its size,
task, shard and category, built once from one listing of the input and read by every
later parse and job, so nobody lists 56k objects twice and no source file is ever a
Snakemake input (Snakemake stats every input each round)."""

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardwise.errors import InputError, RecordError
from shardwise.run.manifest import Task, build_tasks, category_of
from shardwise.run.record import Fields
from shardwise.run.runjson import RunMeta, fingerprint
from shardwise.run.sharding import shard_for_task, shard_range
from shardwise.store.atomic import json_bytes, write_atomic

PLAN_PARQUET = "plan.parquet"
PLAN_JSON = "plan.json"

#: ``identity``: what identified the file's content when it was planned, "<size>:<version>"
#: (mtime in ns locally, the ETag on S3); null in plans from before.
SCHEMA = pa.schema(
    [("file", pa.string()), ("size", pa.int64()), ("task_id", pa.string()),
     ("shard", pa.int64()), ("category", pa.string()), ("identity", pa.string())]
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class PlanSummary:
    """What plan.json records, with the assignment the plan was built for: a plan and a
    run.json that disagree (an interrupted re-pin) are told apart before anything counts."""

    fingerprint: str
    tasks: int
    files: int
    bytes: int
    shards_total: int
    shards_empty: int
    built_at: str
    minimum_shard_index: int | None = None
    files_per_task: int | None = None

    def to_json(self) -> bytes:
        """plan.json's bytes."""
        return json_bytes(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Parse plan.json; RecordError naming the field when it is not one."""
        return Fields.parse(raw, where).into(cls)

    def mismatch(self, meta: RunMeta) -> list[str]:
        """How this plan differs from the assignment ``meta`` (run.json) pins: one line each."""
        pinned = (
            ("total_shards", self.shards_total, meta.total_shards),
            ("minimum_shard_index", self.minimum_shard_index, meta.minimum_shard_index),
            ("files_per_task", self.files_per_task, meta.files_per_task),
            ("fingerprint", self.fingerprint, meta.fingerprint),
        )
        return [
            f"{name} {ours!r} != {theirs!r}"
            for name, ours, theirs in pinned
            if ours is not None and ours != theirs
        ]


def build(
    files: list[tuple[str, int]],
    *,
    files_per_task: int,
    total_shards: int,
    minimum_shard_index: int,
    category_regex: str,
    tasks: list[Task] | None = None,
    versions: Mapping[str, str] | None = None,
) -> pa.Table:
    """One row per file, sorted by file; each task's files share its id and shard
    (``tasks``: the grouping already made; ``versions`` make each file's identity)."""
    sizes = dict(files)
    columns: dict[str, list] = {name: [] for name in SCHEMA.names}
    for task in tasks if tasks is not None else build_tasks(list(sizes), files_per_task):
        shard = shard_for_task(task.task_id, total_shards, minimum_shard_index)
        category = category_of(task.files[0], category_regex)
        for rel in task.files:
            known = identity(sizes[rel], versions[rel]) if versions is not None else None
            row = (rel, sizes[rel], task.task_id, shard, category, known)
            for column, value in zip(columns.values(), row, strict=True):
                column.append(value)
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def identity(size: int, version: str) -> str:
    """What identifies a file's content at no cost: its size and its listing's version."""
    return f"{size}:{version}"


def summarize(
    table: pa.Table, total_shards: int, minimum_shard_index: int = 0, files_per_task: int = 1
) -> PlanSummary:
    """Counts for plan.json (and the assignment it was built for); ``shards_empty`` are
    shards no task hashed to."""
    task_ids = pc.unique(table["task_id"]).to_pylist()
    used = len(pc.unique(table["shard"])) if table.num_rows else 0
    return PlanSummary(
        fingerprint=fingerprint(task_ids),
        tasks=len(task_ids),
        files=table.num_rows,
        bytes=int(pc.sum(table["size"]).as_py() or 0),
        shards_total=total_shards,
        shards_empty=total_shards - used,
        built_at=datetime.now(UTC).isoformat(timespec="seconds"),
        minimum_shard_index=minimum_shard_index,
        files_per_task=files_per_task,
    )


def save(run_dir: Path, table: pa.Table, summary: PlanSummary) -> None:
    """Write plan.parquet then plan.json, each atomically (plan.json marks it complete)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    write_atomic(run_dir / PLAN_PARQUET, sink.getvalue().to_pybytes())
    write_atomic(run_dir / PLAN_JSON, summary.to_json())


def load_summary(run_dir: Path) -> PlanSummary | None:
    """plan.json, or None when no complete plan is cached."""
    path = Path(run_dir) / PLAN_JSON
    try:
        return PlanSummary.from_json(path.read_bytes(), str(path))
    except FileNotFoundError:
        return None
    except RecordError as e:
        msg = f"{path} is corrupt ({e.reason}); delete it and plan.parquet to re-plan"
        raise InputError(msg) from e


def load_summary_or_none(run_dir: Path) -> PlanSummary | None:
    """plan.json, or None when there is none or it is corrupt (evidence, not a refusal)."""
    try:
        return load_summary(run_dir)
    except InputError:
        return None


def check_matches(run_dir: Path, meta: RunMeta) -> None:
    """Refuse a cached plan built for another assignment than run.json pins, with the fix."""
    summary = load_summary(run_dir)
    problems = summary.mismatch(meta) if summary is not None else []
    if problems:
        msg = f"{Path(run_dir) / PLAN_JSON} was built for another assignment than run.json pins "
        msg += f"({'; '.join(problems)}), e.g. after an interrupted `shardwise plan --repin`: "
        msg += "run `snakemake -n` (or `shardwise plan --configfile <config>`) to rebuild it"
        raise InputError(msg)


def load(run_dir: Path) -> pa.Table:
    """The cached plan table; a clear error when the run was never planned."""
    path = run_dir / PLAN_PARQUET
    try:
        table = pq.read_table(path)
    except FileNotFoundError as e:
        msg = f"{path} does not exist: run `snakemake` (or a dry run) to plan this run first"
        raise InputError(msg) from e
    if "identity" not in table.column_names:  # planned before identities were recorded
        table = table.append_column("identity", pa.nulls(table.num_rows, pa.string()))
    return table.select(SCHEMA.names).cast(SCHEMA)


def with_identities(table: pa.Table, identities: Mapping[str, str]) -> pa.Table:
    """The plan with the identity of the files in ``identities`` replaced by theirs."""
    if not identities:
        return table
    files = table["file"].to_pylist()
    current = table["identity"].to_pylist()
    new = [identities.get(f, old) for f, old in zip(files, current, strict=True)]
    column = SCHEMA.names.index("identity")
    return table.set_column(column, "identity", pa.array(new, pa.string()))


def changed_files(table: pa.Table, now: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Files whose identity in ``now`` (a new listing) differs from the planned one:
    file -> (planned, now). Files planned without an identity are not compared."""
    planned = zip(table["file"].to_pylist(), table["identity"].to_pylist(), strict=True)
    return {
        rel: (was, now[rel])
        for rel, was in planned
        if was is not None and rel in now and now[rel] != was
    }


def task_ids(table: pa.Table) -> set[str]:
    """The distinct task ids of a plan."""
    return set(pc.unique(table["task_id"]).to_pylist())


def files_of_shard(table: pa.Table, shard: int) -> pa.Table:
    """The plan rows of one shard, in file order."""
    return table.filter(pc.equal(table["shard"], shard))


def nonempty_shards(table: pa.Table) -> set[int]:
    """Shards that hold at least one task."""
    return set(pc.unique(table["shard"]).to_pylist())


def files_per_shard(table: pa.Table) -> dict[int, int]:
    """How many files the plan gives each shard that has any."""
    shards, counts = np.unique(table["shard"].to_numpy(), return_counts=True)
    return {int(s): int(c) for s, c in zip(shards, counts, strict=True)}


def empty_shards(table: pa.Table, total_shards: int, minimum_shard_index: int) -> list[int]:
    """Shards no task hashed to: they complete at once."""
    used = nonempty_shards(table)
    return [s for s in shard_range(total_shards, minimum_shard_index) if s not in used]


def dictionary(column: pa.ChunkedArray | pa.Array) -> tuple[list[str], np.ndarray]:
    """Distinct values of a string column (a plan's ``task_id``, ``category``) and each
    row's index into them, as int64 codes (same value, same code)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = pc.dictionary_encode(column)
    names = [str(v) for v in encoded.dictionary.to_pylist()]
    return names, encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


@dataclass(frozen=True, eq=False, kw_only=True)
class TaskIndex:
    """A plan's tasks as arrays, for the views that count per task (coverage, domains); a
    task's category is its first file's; ``file_task`` maps each plan row to its task."""

    task_ids: list[str]
    file_task: np.ndarray  # int64, per plan row
    first_row: np.ndarray  # int64, per task: its first plan row
    categories: list[str]
    task_category: np.ndarray  # int64, per task: index into ``categories``
    task_shard: np.ndarray  # int64, per task
    task_bytes: np.ndarray  # float64, per task: input bytes of its files

    def __len__(self) -> int:
        return len(self.task_ids)


def task_index(table: pa.Table, categories: pa.Array | pa.ChunkedArray | None = None) -> TaskIndex:
    """Index ``table``'s tasks; ``categories`` (one per row) replaces its category column."""
    task_ids, file_task = dictionary(table["task_id"])
    _, first_row = np.unique(file_task, return_index=True)
    column = table["category"] if categories is None else categories
    names, codes = dictionary(column.fill_null(""))
    size = table["size"].to_numpy().astype(np.float64)
    shard = table["shard"].to_numpy().astype(np.int64)
    task_bytes = np.bincount(file_task, weights=size, minlength=len(task_ids))
    return TaskIndex(
        task_ids=task_ids,
        file_task=file_task,
        first_row=first_row.astype(np.int64),
        categories=names,
        task_category=codes[first_row],
        task_shard=shard[first_row],
        task_bytes=task_bytes,
    )
