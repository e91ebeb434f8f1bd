"""``shardwise shard-of``: the logical shard of task ids, by the pinned hash rule."""

import argparse

from shardwise.config import check_shard_params
from shardwise.run.sharding import shard_for_task


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``shard-of``."""
    p = sub.add_parser(
        "shard-of",
        help="print the logical shard of each task id",
        description="Print the logical shard of each task id, one per line: "
        "int(sha256(id)[:16], 16) % total_shards + minimum_shard_index (NeMo Curator's rule).",
    )
    p.add_argument("--total-shards", type=int, required=True, help="the run's total_shards")
    p.add_argument(
        "--minimum-shard-index", type=int, default=0, help="the run's first shard (default 0)"
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="task ids (paths relative to the input)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """One shard number per id."""
    total, minimum = check_shard_params(args.total_shards, args.minimum_shard_index)
    for task_id in args.ids:
        print(shard_for_task(task_id, total, minimum))
    return 0
