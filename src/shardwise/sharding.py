"""The shard assignment rule: the one place it lives.

``shard = int(sha256(task_id)[:16 hex], 16) % total_shards + minimum_shard_index``,
the same rule as NeMo Curator's SLURM arrays (``slurm_array_shard_for_task``), so a
shard is a uniform random sample of the corpus, results agree with Curator for the
same ids, and a retry never moves work to another shard.
"""

from __future__ import annotations

import hashlib

from shardwise.errors import ConfigError


def check_shard_params(total_shards: object, minimum_shard_index: object) -> tuple[int, int]:
    """Validate the two numbers that define an assignment; bools and floats are refused."""
    if isinstance(total_shards, bool) or not isinstance(total_shards, int):
        msg = f"sharding.total_shards must be an integer > 0, got {total_shards!r}"
        raise ConfigError(msg)
    if total_shards <= 0:
        msg = f"sharding.total_shards must be > 0, got {total_shards!r}"
        raise ConfigError(msg)
    if isinstance(minimum_shard_index, bool) or not isinstance(minimum_shard_index, int):
        msg = f"sharding.minimum_shard_index must be an integer >= 0, got {minimum_shard_index!r}"
        raise ConfigError(msg)
    if minimum_shard_index < 0:
        msg = f"sharding.minimum_shard_index must be >= 0, got {minimum_shard_index!r}"
        raise ConfigError(msg)
    return total_shards, minimum_shard_index


def shard_for_task(task_id: str, total_shards: int, minimum_shard_index: int = 0) -> int:
    """The logical shard of ``task_id`` (call ``check_shard_params`` once beforehand)."""
    digest = hashlib.sha256(task_id.encode("utf-8")).hexdigest()
    return int(digest[:16], 16) % total_shards + minimum_shard_index


def shard_range(total_shards: int, minimum_shard_index: int) -> range:
    """Every logical shard of a run, empty or not."""
    return range(minimum_shard_index, minimum_shard_index + total_shards)
