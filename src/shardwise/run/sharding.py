"""The shard assignment rule: the one place it lives.

``shard = int(sha256(task_id)[:16 hex], 16) % total_shards + minimum_shard_index``,
the same rule as NeMo Curator's SLURM arrays (``slurm_array_shard_for_task``), so a
shard is a uniform random sample of the corpus, results agree with Curator for the
same ids, and a retry never moves work to another shard.
"""

import hashlib


def shard_for_task(task_id: str, total_shards: int, minimum_shard_index: int = 0) -> int:
    """The logical shard of ``task_id`` (check the numbers with ``config.check_shard_params``)."""
    digest = hashlib.sha256(task_id.encode("utf-8")).hexdigest()
    return int(digest[:16], 16) % total_shards + minimum_shard_index


def shard_range(total_shards: int, minimum_shard_index: int) -> range:
    """Every logical shard of a run, empty or not."""
    return range(minimum_shard_index, minimum_shard_index + total_shards)
