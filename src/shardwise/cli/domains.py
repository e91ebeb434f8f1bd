"""``shardwise domains``: the corpus's label distribution so far, with 95% intervals."""

import argparse
import sys
from pathlib import Path

from shardwise.cli.common import add_format, add_run_dir, bring_in_campaign, emit, positive_int
from shardwise.ops.domains import compute as domains
from shardwise.ops.domains import render as domains_format
from shardwise.ops.domains.plot import render_png


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``domains``."""
    parser = sub.add_parser(
        "domains",
        help="the corpus's label distribution so far, with 95%% confidence intervals",
        description="Estimate each label's (or label pair's) share of the corpus's documents "
        "or text bytes from the shards finished so far, post-stratified by category, with "
        "95% confidence intervals that shrink to zero as the last shard lands. Reads one "
        "summary per finished shard. Method: docs/domains.md.",
    )
    add_run_dir(parser, "domains")
    view = parser.add_mutually_exclusive_group()
    view.add_argument(
        "--pair",
        metavar="A,B",
        help="a pair of classifiers whose joint counts were kept, e.g. topic,format "
        "(default: the first configured pair)",
    )
    view.add_argument("--classifier", metavar="NAME", help="one classifier, e.g. topic")
    parser.add_argument(
        "--by",
        choices=("category",),
        default=None,
        help="also estimate each category on its own (the plan's categories)",
    )
    parser.add_argument(
        "--weight",
        choices=domains.WEIGHTS,
        default=None,
        help="share of documents (the default), of UTF-8 text bytes, or of tokens in the "
        "training tokenizer (runs labelled with domains.tokenizer set; the default of "
        "--format weborganizer there)",
    )
    add_format(parser, domains_format.FORMATS)
    parser.add_argument(
        "--top",
        type=positive_int,
        default=None,
        help="rows per table in table/markdown (default: all labels; "
        f"{domains_format.DEFAULT_TOP} pairs)",
    )
    parser.add_argument(
        "--png",
        type=Path,
        default=None,
        help="also write a picture: the pair's heatmap with marginal bars (a bar chart "
        "for --classifier)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the estimate (and write the picture); exit 2 when the run directory is not one."""
    bring_in_campaign(args.run_dir)
    d = domains.view(
        args.run_dir,
        pair=args.pair,
        classifier=args.classifier,
        weight=args.weight,
        fmt=args.format,
    )
    by_category = args.by == "category"
    emit(
        args.format,
        lambda: domains_format.to_dict(d, by_category=by_category),
        lambda fmt: domains_format.FORMATTERS[fmt](d, by_category=by_category, top=args.top),
    )
    if args.png is not None:
        args.png.parent.mkdir(parents=True, exist_ok=True)
        args.png.write_bytes(render_png(d.data, d))
        print(f"wrote {args.png}", file=sys.stderr)
    return 0
