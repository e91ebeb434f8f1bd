"""The shard markers kept true to the plan at planning: markers of another assignment
removed, shards that need no job (empty, or every file marked done) marked."""

import shutil
from pathlib import Path

import pyarrow as pa

from shardwise.run import (
    failures,
    journal,
    markers,
    outputs,
    plan,
    runjson,
)
from shardwise.run.sharding import shard_range
from shardwise.store.location import Location


def reset_run_state(run_dir: Path) -> None:
    """Forget the per-shard state of a re-pinned run (shard numbers may now differ)."""
    for name in (markers.SHARDS_DIR, journal.PROGRESS_DIR):
        shutil.rmtree(run_dir / name, ignore_errors=True)
    (run_dir / markers.OUTPUT_MARKERS).unlink(missing_ok=True)
    failures.set_aside(run_dir)


def remove_stale_markers(run_dir: Path, table: pa.Table, meta: runjson.RunMeta) -> list[int]:
    """Remove shard markers that disagree with the plan (another assignment, other files):
    Snakemake would count them done. The shards removed."""
    within = shard_range(meta.total_shards, meta.minimum_shard_index)
    done = markers.read_done(run_dir, within, files=plan.files_per_shard(table))
    return markers.remove_shard_markers(run_dir, done.stale)


def mark_shards_without_work(
    run_dir: Path,
    table: pa.Table,
    meta: runjson.RunMeta,
    output: Location,
    quarantined: set[str] | None = None,
) -> dict[str, int]:
    """Mark empty shards, and shards whose every file has an output marker or is
    quarantined, as done (the output listed once, only while such a shard is open)."""
    quarantined = quarantined or set()
    done = markers.done_shards(run_dir)
    counts = {"empty": 0, "remote": 0}
    assignment = dict(total_shards=meta.total_shards, minimum_shard_index=meta.minimum_shard_index)
    for shard in plan.empty_shards(table, meta.total_shards, meta.minimum_shard_index):
        if shard not in done:
            empty = markers.ShardMarker(
                shard=shard, tasks=0, files=0, docs=0, source="empty", **assignment
            )
            markers.write_shard_marker(run_dir, empty)
            counts["empty"] += 1
    open_shards = plan.nonempty_shards(table) - done
    if not open_shards:
        return counts
    marked = outputs.marked(output)
    if output.remote:  # jobs read this instead of probing each file's marker
        markers.write_snapshot(run_dir, marked)
    settled = marked | quarantined
    if not settled:
        return counts
    rows = table.to_pydict()
    per_shard: dict[int, list[int]] = {}
    for i, shard in enumerate(rows["shard"]):
        if shard in open_shards:
            per_shard.setdefault(shard, []).append(i)
    for shard, idx in per_shard.items():
        if all(rows["file"][i] in settled for i in idx):
            left_out = sum(1 for i in idx if rows["file"][i] in quarantined)
            tasks = len({rows["task_id"][i] for i in idx})
            marker = markers.ShardMarker(
                shard=shard,
                tasks=tasks,
                files=len(idx),
                docs=None,
                source="remote",
                quarantined=left_out,
                **assignment,
            )
            markers.write_shard_marker(run_dir, marker)
            counts["remote"] += 1
    return counts
