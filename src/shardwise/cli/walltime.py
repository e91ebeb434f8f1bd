"""``shardwise walltime``: the runtime each group of K shards would ask SLURM for."""

import argparse
from pathlib import Path

from shardwise.config import Settings, load_yaml
from shardwise.planner.walltime import estimate
from shardwise.run.sharding import shard_range


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``walltime``."""
    p = sub.add_parser(
        "walltime",
        help="the runtime each group of K shards would request",
        description="Print the SLURM runtime each group of K shards would request, computed "
        "from the input size and the speed measured so far (see walltime in the config).",
    )
    p.add_argument("--configfile", default="config/config.yaml", help="the run's config file")
    p.add_argument(
        "--group-size", "-k", type=int, default=1, help="shards per SLURM job (group-components)"
    )
    p.add_argument("--attempt", type=int, default=1, help="Snakemake attempt (multiplies it)")
    p.add_argument("--verbose", "-v", action="store_true", help="explain each shard's figure")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """One line per group: its total and each shard's minutes."""
    settings = Settings.from_config(load_yaml(Path(args.configfile)))
    shards = list(shard_range(settings.total_shards, settings.minimum_shard_index))
    k = args.group_size
    for start in range(0, len(shards), k):
        group = [estimate(settings, s, args.attempt) for s in shards[start : start + k]]
        total = sum(e.minutes for e in group)
        print(f"group {start // k}: {total} min = " + " + ".join(str(e.minutes) for e in group))
        if args.verbose:
            for e in group:
                print("  " + e.explain())
    return 0
