"""``shardwise verify``: an fsck of a run; ``--repair`` removes exactly the broken markers."""

import argparse
import functools
import sys
from typing import TextIO

from shardwise.cli.common import add_format, add_run_dir, emit
from shardwise.errors import ShardwiseError
from shardwise.ops import verify

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_CANNOT_VERIFY = 2


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``verify``."""
    parser = sub.add_parser(
        "verify", help="check a run's outputs against its markers and inputs (an fsck)",
        description="Check every done shard and file marker: sidecar, stats, row counts, "
        "ids in order, classifier columns; list orphans. Exit 0 when consistent, 1 with "
        "one line per problem, 2 when the run cannot be verified.",
    )  # fmt: skip
    add_run_dir(parser)
    parser.add_argument(
        "--sample", type=float, default=1.0, metavar="FRACTION",
        help="read the contents of this random fraction of marked files (default 1: all)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=None, help="seed for --sample")
    parser.add_argument("--jobs", type=int, default=4,
                        help="files checked in parallel (I/O bound on S3)")  # fmt: skip
    parser.add_argument("--complete", action="store_true",
                        help="also a problem: any shard not done yet")  # fmt: skip
    parser.add_argument(
        "--repair", action="store_true",
        help="remove exactly the markers of the broken files (and their shard markers), "
        "printing each, so the next snakemake run relabels only those files; first, make the "
        "two run.json copies one again (a damaged or missing one from the intact one, the "
        "output root's when they disagree)",
    )  # fmt: skip
    parser.add_argument(
        "--accept-changed", action="store_true",
        help="keep the labels of input files changed in place since they were labelled (on "
        "purpose): the plan takes their new identity; --repair relabels them instead",
    )  # fmt: skip
    add_format(parser, ("table", "json"), "table: one line per finding (default); json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Findings on stdout, the summary last; 0 consistent, 1 problems, 2 cannot verify."""
    notes = sys.stderr if args.format == "json" else sys.stdout  # json keeps stdout clean
    check = functools.partial(
        verify.verify_run, args.run_dir, sample=args.sample, seed=args.seed, jobs=args.jobs,
        complete=args.complete,
    )  # fmt: skip
    try:
        if args.repair:  # first: every check below reads run.json
            for line in verify.restore_run_json(args.run_dir):
                print(line, file=notes)
        report = check()
        if args.accept_changed and report.changed:
            for line in verify.accept_changed(args.run_dir, report):
                print(line, file=notes)
            report = check()  # the plan took their new identity
    except ShardwiseError as e:
        print(f"shardwise verify: cannot verify {args.run_dir}: {e}", file=sys.stderr)
        return EXIT_CANNOT_VERIFY
    emit(args.format, report.to_json, lambda _fmt: "\n".join(report.lines()))
    if not _copies_and_inputs(args, report, notes):
        return EXIT_PROBLEMS
    broken = len(report.broken_files) + len(report.broken_shards)
    rebuild = len(report.rebuild - report.broken_files)
    if not broken and not rebuild:
        return EXIT_OK if report.ok else EXIT_PROBLEMS
    if not args.repair:
        fixes = []
        if broken:
            text = f"removes the markers of {len(report.broken_files)} broken file(s) and of "
            reset = len(verify.shards_to_reset(args.run_dir, report))
            text += f"the {reset} shard(s) that hold them, "
            fixes.append(text + "so the next snakemake run relabels only those files")
        if rebuild:
            text = f"writes the Dolma attributes of {rebuild} labelled file(s) again from their "
            fixes.append(text + "sidecars (nothing is relabelled)")
        print(f"fix: `{verify.repair_command(args.run_dir)}` " + "; and ".join(fixes), file=notes)
        return EXIT_PROBLEMS
    for line in verify.repair(args.run_dir, report):
        print(line, file=notes)
    left = len(report.problems) - report.repairable
    print(
        ("repaired: run `snakemake` (with your profile) to relabel them" if broken
         else f"repaired: {rebuild} file(s)' derived outputs rewritten, nothing to relabel")
        + (f"; {left} problem(s) above need another fix" if left else ""),
        file=notes,
    )  # fmt: skip
    return EXIT_OK if left == 0 else EXIT_PROBLEMS


def _copies_and_inputs(
    args: argparse.Namespace, report: verify.VerifyReport, notes: TextIO
) -> bool:
    """The fixes for disagreeing run.json copies and a changed input; False when nothing
    more can be advised (the findings were measured against a copy --repair replaces)."""
    if report.copies and not args.repair:
        print(f"fix: {report.copies}", file=notes)
        if report.measured_on_replaced:  # what else it found may not hold under the other
            text = "note: the findings above were measured against the run directory's "
            text += "run.json, which --repair replaces first: run verify again after it"
            print(text, file=notes)
            return False
    if report.inputs_gone or report.input_drift:
        gone = " --gone keep|remove" if report.inputs_gone or report.input_drift.get("gone") else ""
        msg = f"fix: `shardwise plan --extend{gone} --configfile <config>` takes the input's "
        msg += "current file set into the run (new files are labelled, gone ones leave it)"
        print(msg, file=notes)
    return True
