"""``shardwise verify``: an fsck of a run; ``--repair`` removes exactly the broken markers."""

import argparse
import functools
import sys

from shardwise.cli.common import add_format, add_run_dir, bring_in_campaign, emit
from shardwise.errors import ShardwiseError
from shardwise.ops.verify import check as verify
from shardwise.ops.verify import repair as verify_repair

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_CANNOT_VERIFY = 2


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``verify``."""
    parser = sub.add_parser(
        "verify",
        help="check a run's outputs against its markers and inputs (an fsck)",
        description="Check every done shard and file marker: sidecar, stats, row counts, "
        "ids in order, classifier columns; list orphans. Exit 0 when consistent, 1 with "
        "one line per problem, 2 when the run cannot be verified.",
    )
    add_run_dir(parser)
    parser.add_argument(
        "--sample",
        type=float,
        default=1.0,
        metavar="FRACTION",
        help="read the contents of this random fraction of marked files (default 1: all)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for --sample")
    parser.add_argument(
        "--jobs", type=int, default=4, help="files checked in parallel (I/O bound on S3)"
    )
    parser.add_argument(
        "--complete", action="store_true", help="also a problem: any shard not done yet"
    )
    parser.add_argument(
        "--repair",
        action="store_true",
        help="remove exactly the markers of the broken files (and their shard markers), "
        "printing each, so the next snakemake run relabels only those files; first, make the "
        "two run.json copies one again (a damaged or missing one from the intact one, the "
        "output root's when they disagree)",
    )
    parser.add_argument(
        "--accept-changed",
        action="store_true",
        help="keep the labels of input files changed in place since they were labelled (on "
        "purpose): the plan takes their new identity; --repair relabels them instead",
    )
    add_format(parser, ("table", "json"), "table: one line per finding (default); json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Findings on stdout, the summary last; 0 consistent, 1 problems, 2 cannot verify."""
    notes = sys.stderr if args.format == "json" else sys.stdout  # json keeps stdout clean
    if not args.repair:
        bring_in_campaign(args.run_dir)
    check = functools.partial(
        verify.verify_run,
        args.run_dir,
        sample=args.sample,
        seed=args.seed,
        jobs=args.jobs,
        complete=args.complete,
    )
    try:
        if args.repair:  # first: every check below reads run.json
            for line in verify_repair.restore_run_json(args.run_dir):
                print(line, file=notes)
        report = check()
        if args.accept_changed and report.changed:
            for line in verify_repair.accept_changed(args.run_dir, report):
                print(line, file=notes)
            report = check()  # the plan took their new identity
    except ShardwiseError as e:
        print(f"shardwise verify: cannot verify {args.run_dir}: {e}", file=sys.stderr)
        return EXIT_CANNOT_VERIFY
    emit(args.format, report.to_json, lambda _fmt: "\n".join(report.lines()))
    advice = verify_repair.advise(args.run_dir, report, repairing=args.repair)
    for line in advice.lines:
        print(line, file=notes)
    if advice.stop:
        return EXIT_PROBLEMS
    if not advice.broken and not advice.rebuild:
        return EXIT_OK if report.ok else EXIT_PROBLEMS
    if not args.repair:
        return EXIT_PROBLEMS
    for line in verify_repair.repair(args.run_dir, report):
        print(line, file=notes)
    print(verify_repair.repaired_line(report, advice), file=notes)
    return EXIT_OK if report.unrepairable == 0 else EXIT_PROBLEMS
