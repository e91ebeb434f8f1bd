"""``shardwise coverage``: what is done and what is left, per category."""

import argparse

from shardwise.cli.common import (
    add_coverage_options,
    add_format,
    add_run_dir,
    bring_in_campaign,
    emit,
)
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage.render import FORMATS, report_dict, report_text


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``coverage``."""
    parser = sub.add_parser(
        "coverage",
        help="what is done and what is left, per category",
        description="Report shards/tasks/files/docs done, per-category completion "
        "with skew flags, throughput per GPU type and an ETA.",
    )
    add_run_dir(parser, "coverage")
    add_format(
        parser,
        FORMATS,
        "table (terminal), json (schema in docs/coverage.md) or markdown",
    )
    add_coverage_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the report; exit 2 when the run directory is not one."""
    bring_in_campaign(args.run_dir)
    found = coverage.report(args.run_dir, category_regex=args.category_regex, gpus=args.gpus)
    emit(args.format, lambda: report_dict(found), lambda fmt: report_text(found, fmt))
    return 0
