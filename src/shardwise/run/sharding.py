"""The shard assignment rule: the one place it lives.

``shard = int(sha256(task_id)[:16 hex], 16) % total_shards + minimum_shard_index``,
the same rule as NeMo Curator's SLURM arrays (``slurm_array_shard_for_task``), so a
shard is a uniform random sample of the corpus, results agree with Curator for the
same ids, and a retry never moves work to another shard. And the one check of how many
shards a corpus of so many tasks may have (:func:`check_shard_count`).
"""

import hashlib

from shardwise.errors import ConfigError


def shard_for_task(task_id: str, total_shards: int, minimum_shard_index: int = 0) -> int:
    """The logical shard of ``task_id`` (check the numbers with ``config.check_shard_params``)."""
    digest = hashlib.sha256(task_id.encode("utf-8")).hexdigest()
    return int(digest[:16], 16) % total_shards + minimum_shard_index


def shard_range(total_shards: int, minimum_shard_index: int) -> range:
    """Every logical shard of a run, empty or not."""
    return range(minimum_shard_index, minimum_shard_index + total_shards)


#: More shards than this many per task (and than MIN_SHARD_CEILING) are refused: nearly
#: all of them would be empty, each one a Snakemake target and a marker file.
MAX_SHARDS_PER_TASK = 10
MIN_SHARD_CEILING = 1_000
#: Above this, Snakemake's planning alone takes minutes (~37 s at 60,000 targets).
MAX_TOTAL_SHARDS = 200_000


def check_shard_count(total_shards: int, tasks: int) -> None:
    """Refuse an assignment that is mostly empty shards, or more than Snakemake can plan
    (a new run's or a re-pin's dry run, before anything is pinned)."""
    ceiling = min(max(MAX_SHARDS_PER_TASK * tasks, MIN_SHARD_CEILING), MAX_TOTAL_SHARDS)
    if total_shards <= ceiling:
        return
    cost = "each shard is a Snakemake target and a marker file (a dry run takes ~5 s at "
    cost += "5,000 targets and ~37 s at 60,000)"
    if total_shards > MAX_TOTAL_SHARDS and tasks * MAX_SHARDS_PER_TASK >= MAX_TOTAL_SHARDS:
        why = f"more than Snakemake can plan in reasonable time ({MAX_TOTAL_SHARDS:,} at most)"
        fix = "or raise input.files_per_task to group files into fewer tasks"
    else:
        why = f"at least {total_shards - tasks:,} of them would be empty"
        fix = f"e.g. {min(tasks, ceiling):,} for one task per shard"
    msg = f"config sharding.total_shards: {total_shards:,} for {tasks:,} task(s): {why}; "
    raise ConfigError(msg + f"{cost}. Set it to at most {ceiling:,} ({fix}); nothing was pinned")
