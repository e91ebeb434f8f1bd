"""``shardwise plan``: what a dry run does first (check, list, pin, plan, report)."""

import argparse
import sys
from pathlib import Path

from shardwise.config import load_yaml
from shardwise.planner.extend import GONE, extend
from shardwise.planner.prepare import prepare_run
from shardwise.runtime.dryrun import report_lines


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``plan``."""
    p = sub.add_parser(
        "plan",
        help="list the input, pin run.json and cache the plan",
        description="What a dry run does first: check every classifier, list the input, "
        "create or validate run.json (run directory and output root), cache the plan and "
        "print the coverage report. --repin replaces a pinned run.json whose settings differ, "
        "but only while no file of the run is labelled; --extend takes a grown or shrunken "
        "input into the run under the same assignment.",
    )
    p.add_argument("--configfile", default="config/config.yaml", help="the run's config file")
    p.add_argument(
        "--repin",
        action="store_true",
        help="re-pin changed settings (classifiers, total_shards, files_per_task, ...) "
        "while nothing is labelled; says what changed",
    )
    p.add_argument(
        "--extend",
        action="store_true",
        help="take a grown or shrunken input into this run under the same assignment: new "
        "files join the shards the hash gives them, nothing labelled is touched",
    )
    p.add_argument(
        "--gone",
        choices=GONE,
        help="with --extend: what becomes of the outputs of planned files that are gone "
        "from the input (keep: left in place; remove: deleted); either way they leave the run",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Plan, print the planning report on stderr and a one-line summary on stdout."""
    config = load_yaml(Path(args.configfile))
    if args.gone and not args.extend:
        print("shardwise plan: --gone goes with --extend", file=sys.stderr)
        return 2
    if args.extend and args.repin:
        print("shardwise plan: --extend and --repin are two different changes", file=sys.stderr)
        return 2
    if args.extend:
        for line in extend(config, gone=args.gone).lines():
            print(line, file=sys.stderr)
    info = prepare_run(config, main_process=True, dryrun=True, repin=args.repin)
    sys.stderr.write("".join(f"{line}\n" for line in report_lines(info)))
    print(f"{len(info.shards)} shards planned in {info.run_dir}")
    return 0
