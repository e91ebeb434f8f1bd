"""``shardwise select``: a selection of the labelled documents that hits target domain
weights at a token budget, with its report and ``dolma mix`` config."""

import argparse
import sys
from pathlib import Path

from shardwise.cli.common import add_format, add_run_dir, bring_in_campaign, emit, positive_int
from shardwise.errors import ConfigError
from shardwise.ops.select import plan as select
from shardwise.ops.select import render as select_report


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``shardwise select``."""
    p = subparsers.add_parser(
        "select",
        help="select documents to hit target domain weights at a token budget (a training mix)",
        description="Pass 1 turns target weights (WebOrganizer's domain_statistics shape: "
        '[{"domain": [topic, format] or a label, "weight": w}], ids or names) and a token '
        "budget into a rate per domain, from the shard summaries; pass 2 takes each labelled "
        "document floor(rate) + 1[h(seed, id) < frac(rate)] times, per file from its sidecar. "
        "Writes per file a selection Parquet (row, id, repeats), Dolma repeat counts, a "
        "`dolma mix` config (one stream per repeat), report.json and a picture, under "
        "<run_dir>/selections/NAME. Without --weights: finish and report the saved selection "
        "NAME. `snakemake select_all` runs pass 2 as jobs (after --plan-only).",
    )
    add_run_dir(p, "select")
    p.add_argument("--weights", type=Path, default=None, help="the target weights (JSON)")
    p.add_argument("--tokens", default=None, metavar="N", help="the token budget: 100B, 2.5M, ...")
    p.add_argument(
        "--max-repeat",
        type=positive_int,
        default=1,
        metavar="K",
        help="the most copies of one document (default 1: none twice)",
    )
    p.add_argument("--seed", type=int, default=0, help="the hash's seed (default 0)")
    p.add_argument(
        "--redistribute",
        action="store_true",
        help="spread what capped or empty domains cannot give over the others",
    )
    p.add_argument(
        "--partial",
        action="store_true",
        help="select from what is labelled of a run not yet complete",
    )
    p.add_argument("--pair", default=None, help="the view of cells (default the first pair)")
    p.add_argument(
        "--classifier", default=None, help="the classifier of one-label weights (marginals)"
    )
    p.add_argument("--name", default="selection", help="the selection's name (selection)")
    p.add_argument(
        "--plan-only",
        action="store_true",
        help="only pass 1: then `snakemake select_all` selects the files as jobs",
    )
    p.add_argument(
        "--shard",
        type=int,
        default=None,
        help="select this shard's files only (the select_all job)",
    )
    p.add_argument("--jobs", type=positive_int, default=4, help="shards selected at once (4)")
    p.add_argument(
        "--mix-output", default=None, help="where dolma mix writes (default <selection>/mix)"
    )
    add_format(p)
    p.set_defaults(func=_select)


def _request(args: argparse.Namespace) -> select.Request | None:
    if args.weights is None and args.tokens is None:
        return None
    if args.weights is None or args.tokens is None:
        raise ConfigError("give both --weights and --tokens (or neither, to report a selection)")
    return select.Request(
        name=args.name,
        weights=select.read_weights(args.weights),
        weights_from=str(args.weights),
        budget_tokens=select.parse_budget(args.tokens),
        max_repeat=args.max_repeat,
        seed=args.seed,
        redistribute=args.redistribute,
        partial=args.partial,
        pair=args.pair,
        classifier=args.classifier,
    )


def _select(args: argparse.Namespace) -> int:
    if args.shard is not None:
        record = select_report.run_shard(args.run_dir, args.name, args.shard)
        print(f"selection {args.name!r} shard {args.shard}: {record.files:,} file(s) selected")
        return 0
    bring_in_campaign(args.run_dir)
    report = select_report.run(
        args.run_dir,
        _request(args),
        args.name,
        plan_only=args.plan_only,
        jobs=args.jobs,
        mix_output=args.mix_output,
        progress=sys.stderr.isatty(),
    )
    emit(args.format, report.to_dict, lambda _fmt: "\n".join(select_report.lines(report)))
    return 0
