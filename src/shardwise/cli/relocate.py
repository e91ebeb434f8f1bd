"""``shardwise relocate``: move a run's output to another root, checked before re-pinning."""

import argparse

from shardwise.cli.common import add_run_dir
from shardwise.planner.relocate import relocate


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``relocate``."""
    parser = sub.add_parser(
        "relocate",
        help="move a run's output to another root (after copying it there)",
        description="After copying the output to a new root (rsync -a, aws s3 sync), check "
        "that the copy is complete (every file, same size, same run.json) and re-pin the "
        "run's output root there: the new root's run.json, the run directory's, "
        "settings.json. Nothing is written when the check fails. Then set output.uri in the "
        "config to the new root.",
    )
    add_run_dir(parser)
    parser.add_argument(
        "--to", required=True, metavar="URI", help="the new output root (a folder or s3://…)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check, re-pin, print each file written and what to change in the config."""
    moved = relocate(args.run_dir, args.to)
    print(f"checked: {moved.files:,} file(s) of {moved.old} are in {moved.new}")
    for line in moved.lines:
        print(line)
    print(f"now set output.uri: {moved.new} in the config; {moved.old} may then be removed")
    return 0
