"""``shardwise report``: the run's picture (PNG) and a self-contained HTML page."""

import argparse
import sys
from pathlib import Path

from shardwise.cli.common import add_coverage_options, add_run_dir
from shardwise.ops.coverage.render import shorten
from shardwise.ops.report import page as report


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``report``."""
    parser = sub.add_parser(
        "report",
        help="write an HTML page and a PNG picture of a run's progress",
        description="Per-category completion, shards done over time and throughput per "
        "GPU type, as a PNG and a self-contained HTML page embedding it.",
    )
    add_run_dir(parser, "report")
    parser.add_argument("--out", type=Path, default=Path("report.html"), help="HTML to write")
    parser.add_argument(
        "--png", type=Path, default=None, help="PNG to write (default: beside --out)"
    )
    add_coverage_options(parser)
    parser.add_argument(
        "--domains-png",
        type=Path,
        default=None,
        help="also write the domain distribution's picture (shardwise domains --png) here; "
        "the HTML includes it either way",
    )
    parser.add_argument(
        "--require-complete",
        action="store_true",
        help="exit 1 (after writing) when a planned task is neither labelled nor quarantined: "
        "the workflow's last step, so a run never ends in exit 0 with work left",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the files; exit 2 when the run directory is not one."""
    done = report.write(
        args.run_dir,
        args.out,
        out_png=args.png,
        domains_png=args.domains_png,
        category_regex=args.category_regex,
        gpus=args.gpus,
    )
    print(f"wrote {done.html} and {done.png}")
    if args.domains_png is not None:
        print(f"wrote {args.domains_png}")
    if args.require_complete and done.incomplete:
        cov = done.coverage
        left = f"shards {cov.incomplete_shards}" if cov.incomplete_shards else "no shard left"
        msg = "shardwise report: the run is not complete although Snakemake found every shard "
        msg += f"target: {cov.tasks_left:,} planned task(s) are neither labelled nor quarantined, "
        msg += f"{cov.shards_remaining:,} shard(s) not done ({shorten(left)}). Run snakemake again "
        msg += "(planning removes shard markers that do not match the plan); `shardwise verify "
        print(msg + f"--run-dir {args.run_dir}` names what is missing", file=sys.stderr)
        return 1
    return 0
