"""``shardwise <verb>``: parse, make one package call, print.

Exit codes: 0 success, 1 a ShardwiseError (one line on stderr), 2 usage errors,
143 interrupted by SIGTERM (the shard will be retried).
"""

import argparse
import os
import sys
from collections.abc import Sequence

from shardwise import __version__
from shardwise.cli import (
    adopt,
    await_lease,
    classify_shard,
    cluster,
    coverage,
    demo,
    dolma,
    domains,
    launch,
    plan,
    quarantine,
    relocate,
    report,
    retry_array,
    reweight,
    select,
    shard_of,
    verify,
    walltime,
)
from shardwise.cli.common import not_a_run_dir
from shardwise.errors import ShardwiseError

#: The verbs in the order ``shardwise --help`` lists them.
VERBS = (shard_of, demo, plan, classify_shard, adopt, await_lease, walltime, launch, coverage,
         domains, dolma, reweight, select, retry_array, quarantine, relocate, cluster, report,
         verify)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (every subcommand listed in --help)."""
    about = "Hash-sharded GPU labelling of web corpora (Snakemake + SLURM)."
    parser = argparse.ArgumentParser(prog="shardwise", description=about)
    parser.add_argument("--version", action="version", version=f"shardwise {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for verb in VERBS:
        verb.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``shardwise`` console command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "planned_run", None) and not_a_run_dir(args.run_dir, args.planned_run):
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()
    except ShardwiseError as e:
        print(f"shardwise: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C (a re-pin, a long verify): one line, no traceback. Every file is written
        # atomically and in an order that leaves the old state or the new one.
        msg = f"shardwise {args.command}: interrupted (Ctrl-C); nothing is left half-written: "
        print(msg + "run it again to finish", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `shardwise coverage | head -1`: the reader took what it wanted and left; stop
        # quietly with success (no traceback). Point stdout at /dev/null so the
        # interpreter's final flush cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
