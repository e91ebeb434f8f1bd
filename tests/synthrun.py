"""Build synthetic run directories in the formats of docs/ARCHITECTURE.md (test helper).

Used by the coverage, retry and report tests; writes plan.parquet with pyarrow directly
so those tests do not depend on the planner.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.run.runjson import RunMeta
from shardwise.run.sharding import shard_for_task


def write_run_json(run_dir: Path, total: int, minimum: int = 0, **extra: Any) -> None:
    """A run.json as the planner writes it (``extra`` overrides fields, e.g. output_uri)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fields: dict[str, Any] = {
        "total_shards": total,
        "minimum_shard_index": minimum,
        "files_per_task": 1,
        "input_uri": str(run_dir / "input"),
        "output_uri": str(run_dir / "output"),
        "task_count": 0,
        "fingerprint": "",
        "classifiers": [("topic", "models/topic", "url_text")],
        **extra,
    }
    (run_dir / "run.json").write_bytes(RunMeta.new(**fields).to_json())


def write_shard_markers(
    run_dir: Path,
    shards: Iterable[int],
    *,
    total: int,
    minimum: int = 0,
    body: Callable[[int], Mapping[str, Any]] | None = None,
) -> None:
    """``shards/<n>.done`` for each shard, JSON as ARCHITECTURE.md describes."""
    (run_dir / "shards").mkdir(parents=True, exist_ok=True)
    for shard in shards:
        content = {
            "shard": shard,
            "total_shards": total,
            "minimum_shard_index": minimum,
            "tasks": 0,
            "files": 0,
            "docs": 0,
            "finished_at": "2026-01-01T00:00:00+00:00",
            **(body(shard) if body else {}),
        }
        (run_dir / "shards" / f"{shard}.done").write_text(json.dumps(content))


def stats_for(
    rel: str,
    shard: int,
    *,
    docs: int = 100,
    seconds: float = 10.0,
    size: int = 1000,
    device: str = "NVIDIA H100 80GB HBM3",
    finished_at: str = "2026-01-01T00:00:00+00:00",
) -> dict[str, Any]:
    """One ``.stats.json`` body."""
    return {
        "file": rel,
        "task_id": rel,
        "shard": shard,
        "bytes": size,
        "docs": docs,
        "tokens": docs * 10,
        "seconds": seconds,
        "docs_per_s": docs / seconds,
        "tokens_per_s": docs * 10 / seconds,
        "device": "cuda:0",
        "device_name": device,
        "dtype": "bfloat16",
        "engine": {"batch_tokens": 1024},
        "finished_at": finished_at,
    }


def make_run(
    root: Path,
    files: Sequence[str],
    *,
    total: int,
    minimum: int = 0,
    done_files: Iterable[str] = (),
    sizes: Mapping[str, int] | None = None,
    docs: Mapping[str, int] | None = None,
    seconds: Mapping[str, float] | None = None,
    finished_at: Callable[[int], str] | None = None,
    name: str = "run",
) -> Path:
    """A run dir ``root/<name>`` with output ``root/output``; returns the run dir.

    Each file of ``done_files`` gets its stats and ``.done`` marker; a shard whose
    every file is done gets its shard marker (empty shards are marked done too, as
    ``prepare_run`` does).
    """
    run_dir, output = root / name, root / "output"
    sizes = sizes or {}
    docs = docs or {}
    seconds = seconds or {}
    shard_of = write_plan(run_dir, files, total=total, minimum=minimum, sizes=sizes)
    write_run_json(run_dir, total, minimum, output_uri=str(output))
    done = set(done_files)
    for rel in done:
        target = _mkdir((output / rel).parent) / Path(rel).name
        when = finished_at(shard_of[rel]) if finished_at else "2026-01-01T00:00:00+00:00"
        body = stats_for(rel, shard_of[rel], docs=docs.get(rel, 100),
                         seconds=seconds.get(rel, 10.0), size=sizes.get(rel, 1000),
                         finished_at=when)  # fmt: skip
        Path(f"{target}.stats.json").write_text(json.dumps(body))
        Path(f"{target}.done").write_text(json.dumps({"file": rel, "rows": body["docs"]}))
    members: dict[int, list[str]] = {s: [] for s in range(minimum, minimum + total)}
    for rel, shard in shard_of.items():
        members[shard].append(rel)
    complete = [s for s, rels in members.items() if all(r in done for r in rels)]

    def marker(shard: int) -> dict[str, Any]:
        rels = members[shard]
        return {
            "tasks": len(rels),
            "files": len(rels),
            "docs": sum(docs.get(r, 100) for r in rels),
            "finished_at": finished_at(shard) if finished_at else "2026-01-01T00:00:00+00:00",
        }

    write_shard_markers(run_dir, complete, total=total, minimum=minimum, body=marker)
    return run_dir


def write_plan(
    run_dir: Path,
    files: Sequence[str],
    *,
    total: int,
    minimum: int = 0,
    sizes: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """``plan.parquet`` of ``files`` (one task each); returns each file's shard."""
    sizes = sizes or {}
    shard_of = {f: shard_for_task(f, total, minimum) for f in files}
    ordered = sorted(files)
    pq.write_table(
        pa.table(
            {
                "file": pa.array(ordered, pa.string()),
                "size": pa.array([sizes.get(f, 1000) for f in ordered], pa.int64()),
                "task_id": pa.array(ordered, pa.string()),
                "shard": pa.array([shard_of[f] for f in ordered], pa.int64()),
                "category": pa.array(["/".join(f.split("/")[:2]) for f in ordered], pa.string()),
            }
        ),
        _mkdir(run_dir) / "plan.parquet",
    )
    return shard_of


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
