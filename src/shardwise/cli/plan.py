"""``shardwise plan``: what a dry run does first (check, list, pin, plan, report)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shardwise.config import load_yaml
from shardwise.ops.planning import report_lines
from shardwise.planner.prepare import prepare_run


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``plan``."""
    p = sub.add_parser(
        "plan",
        help="list the input, pin run.json and cache the plan",
        description="What a dry run does first: check every classifier, list the input, "
        "create or validate run.json (run directory and output root), cache the plan and "
        "print the coverage report. --repin replaces a pinned run.json whose settings differ, "
        "but only while no file of the run is labelled.",
    )
    p.add_argument("--configfile", default="config/config.yaml", help="the run's config file")
    p.add_argument(
        "--repin",
        action="store_true",
        help="re-pin changed settings (classifiers, total_shards, files_per_task, ...) "
        "while nothing is labelled; says what changed",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Plan, print the planning report on stderr and a one-line summary on stdout."""
    info = prepare_run(
        load_yaml(Path(args.configfile)), main_process=True, dryrun=True, repin=args.repin
    )
    sys.stderr.write("".join(f"{line}\n" for line in report_lines(info)))
    print(f"{len(info.shards)} shards planned in {info.run_dir}")
    return 0
