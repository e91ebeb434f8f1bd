"""A run as every view opens it: run.json, the plan it pins, the done shards, quarantine.

Coverage, domains, the report and ``retry-array`` start from these same reads, so a
done shard means one thing everywhere: a marker that parses and agrees with the
plan and the pinned assignment (``markers.DoneShards``); a stale marker of another
assignment or a garbled one is done nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from shardwise.errors import InputError, RunMismatchError
from shardwise.run import markers, plan, quarantine, runjson
from shardwise.run.sharding import shard_range


@dataclass(frozen=True, eq=False)
class PinnedRun:
    """A planned run directory, read once."""

    run_dir: Path
    meta: runjson.RunMeta
    plan: pa.Table  # plan.SCHEMA in one chunk: the vectorised views index it directly
    done: markers.DoneShards
    quarantined: dict[str, quarantine.Entry]

    @property
    def shards(self) -> range:
        """The pinned shard numbers."""
        return shard_range(self.meta.total_shards, self.meta.minimum_shard_index)


def read_plan(run_dir: Path, meta: runjson.RunMeta) -> pa.Table:
    """``plan.parquet`` in one chunk, if it is the plan of the assignment run.json pins
    (else RunMismatchError saying how to rebuild it)."""
    try:
        plan.check_matches(run_dir, meta)
        return plan.load(run_dir).combine_chunks()
    except InputError as exc:
        raise RunMismatchError(str(exc)) from exc


def load(run_dir: Path) -> PinnedRun:
    """Open the run in ``run_dir`` (RunMismatchError when it cannot be read as pinned)."""
    run_dir = Path(run_dir)
    meta = runjson.read_run_dir(run_dir)
    table = read_plan(run_dir, meta)
    within = shard_range(meta.total_shards, meta.minimum_shard_index)
    done = markers.read_done(run_dir, within, plan.files_per_shard(table))
    return PinnedRun(run_dir, meta, table, done, quarantine.load(run_dir))
