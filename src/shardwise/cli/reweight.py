"""``shardwise reweight``: target weights from a weights file, some labels scaled."""

import argparse
import json
import sys
from pathlib import Path

from shardwise.ops.select import reweight
from shardwise.store.atomic import write_atomic


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``shardwise reweight``."""
    p = subparsers.add_parser(
        "reweight",
        help="scale the weights of domains holding a label, normalised (for select --weights)",
        description="Read a weights file (WebOrganizer's domain_statistics shape, as "
        "`shardwise domains --format weborganizer` writes it), multiply the weight of every "
        "domain holding each --scale label by its factor, normalise to sum 1, and write "
        "the result for `shardwise select --weights`.",
    )
    p.add_argument("--weights", type=Path, required=True, help="the weights file (JSON)")
    p.add_argument(
        "--scale",
        action="append",
        required=True,
        metavar="LABEL=FACTOR",
        help="e.g. Health=3 (repeatable; a domain holding two scaled labels gets both factors)",
    )
    p.add_argument("--out", type=Path, default=None, help="where to write (default stdout)")
    p.set_defaults(func=_reweight)


def _reweight(args: argparse.Namespace) -> int:
    factors = [reweight.parse_scale(text) for text in args.scale]
    text = json.dumps(reweight.reweight(args.weights, factors), indent=2) + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return 0
    write_atomic(args.out, text.encode("utf-8"))
    said = ", ".join(f"{label} x{factor:g}" for label, factor in factors)
    print(f"wrote {args.out}: {said}, normalised", file=sys.stderr)
    return 0
