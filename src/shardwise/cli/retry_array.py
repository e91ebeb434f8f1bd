"""``shardwise retry-array``: what to resubmit, in NeMo Curator's ``retry_array.py`` format."""

import argparse
import sys

from shardwise.cli.common import add_run_dir
from shardwise.errors import RunMismatchError
from shardwise.ops.jobs.retry_array import retry
from shardwise.run import ranges


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``retry-array``."""
    parser = sub.add_parser(
        "retry-array",
        help="print the SLURM array expression of shards not yet done",
        description="Print what to resubmit after a partial run, in NeMo Curator retry_array.py "
        "format. Prints nothing when every shard is done.",
    )
    add_run_dir(parser, "retry-array")
    parser.add_argument(
        "--format",
        choices=("expression", "fields"),
        default="expression",
        help="expression: the range expression; fields: "
        "ARRAY_EXPRESSION SHARD_INDEX_OFFSET MINIMUM_SHARD_INDEX TOTAL_SHARDS per line",
    )
    parser.add_argument(
        "--max-array-size",
        type=int,
        default=None,
        metavar="N",
        help="SLURM MaxArraySize: split into windows of N array indices (needs --format fields)",
    )
    parser.set_defaults(func=lambda args: run(parser, args))


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Print the lines; usage errors exit 2 through ``parser.error``."""
    if args.max_array_size is not None:
        if args.format != "fields":
            parser.error("--max-array-size needs --format fields (the offset is a field)")
        if args.max_array_size <= 0:
            parser.error(f"--max-array-size must be positive, got {args.max_array_size}")
    try:
        found = retry(args.run_dir, fmt=args.format, max_array_size=args.max_array_size)
    except RunMismatchError as exc:
        print(f"shardwise retry-array: {exc}", file=sys.stderr)
        return 2
    if found.unreadable:
        msg = f"note: shard marker(s) {ranges.compress(found.unreadable)} are unreadable and count "
        print(msg + "as not done (`shardwise verify --repair` removes them)", file=sys.stderr)
    if found.stale:
        msg = f"note: shard marker(s) {ranges.compress(found.stale)} are of another assignment "
        msg += "and count as not done (`snakemake -n` removes them)"
        print(msg, file=sys.stderr)
    if found.quarantined:
        msg = f"note: {found.quarantined} quarantined file(s) are left out of this run and need "
        print(msg + "no retry (`shardwise quarantine --list`)", file=sys.stderr)
    for line in found.lines:
        print(line)
    return 0
