"""``shardwise demo DIR``: the demo corpus, tiny offline models and a config that runs them."""

import argparse
from pathlib import Path

from shardwise.demo.corpus import write_demo


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``demo``."""
    p = sub.add_parser(
        "demo",
        help="write the demo corpus, tiny offline models and config",
        description="Write a small demo corpus (Parquet and JSONL), four tiny classifiers with "
        "random weights (built offline: their labels are meaningless) and DIR/config.yaml.",
    )
    p.add_argument("dir", help="folder to write (e.g. demo)")
    p.add_argument(
        "--dolma",
        action="store_true",
        help="the corpus in Dolma's layout (DIR/dolma/documents/...json.gz, metadata.url), "
        "labelled into Dolma attributes too (DIR/dolma/attributes/weborganizer)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the demo and say how to run it."""
    config = write_demo(Path(args.dir), dolma=args.dolma)
    print(f"demo written to {args.dir}; run it with: snakemake --cores 2 --configfile {config}")
    return 0
