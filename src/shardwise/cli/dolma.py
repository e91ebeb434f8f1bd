"""``shardwise dolma export|mix-config``: Dolma attributes and a ``dolma mix`` config."""

import argparse
import sys
from pathlib import Path

from shardwise.cli.common import add_run_dir, positive_int
from shardwise.ops.dolma import mix as dolma


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``shardwise dolma`` (``export``, ``mix-config``)."""
    parser = subparsers.add_parser(
        "dolma",
        help="labels as Dolma attributes, and the dolma mix config that filters on them",
        description="The labels as Dolma attributes (output.dolma), which `dolma mix` filters on.",
    )
    sub = parser.add_subparsers(dest="dolma_command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "export",
        help="write the missing attributes of labelled files from their sidecars (no GPU)",
        description="For every labelled JSON Lines file without its attributes file, write it "
        "from the sidecar alone: no document is read, no model runs. Resumable and "
        "idempotent (existing files are kept unless --force); in parallel on object stores. "
        "`snakemake dolma_all` runs it per shard as jobs.",
    )
    add_run_dir(p, "dolma export")
    p.add_argument("--shard", type=int, default=None, help="only this shard's files")
    p.add_argument("--jobs", type=positive_int, default=8, help="files written at once (8)")
    p.add_argument("--force", action="store_true", help="write every file again")
    p.set_defaults(func=_export)
    p = sub.add_parser(
        "mix-config",
        help="print a dolma mix config that keeps the documents of chosen domains",
        description="Print (or write) the `dolma mix` config whose stream keeps this run's "
        "labelled documents of the domains named by --keep (any of them): a label of one "
        "classifier (topic=Health) or a cell of several (topic=Health,format=Tutorial).",
    )
    add_run_dir(p, "dolma mix-config")
    p.add_argument(
        "--keep",
        action="append",
        default=[],
        metavar="CLASSIFIER=LABEL[,CLASSIFIER=LABEL]",
        help="a domain to keep (repeatable: a document is kept when any holds)",
    )
    p.add_argument(
        "--min-prob",
        type=float,
        default=None,
        metavar="P",
        help="also require each named classifier's probability >= P",
    )
    p.add_argument("--output", required=True, help="where dolma mix writes the mixed documents")
    p.add_argument("--stream", default="weborganizer", help="the stream's name (weborganizer)")
    p.add_argument("--processes", type=positive_int, default=1, help="dolma mix processes (1)")
    p.add_argument("--out", type=Path, default=None, help="write the config here (default: print)")
    p.set_defaults(func=_mix_config)


def _export(args: argparse.Namespace) -> int:
    done = dolma.export(
        args.run_dir,
        shard=args.shard,
        jobs=args.jobs,
        force=args.force,
        progress=sys.stderr.isatty(),
    )
    print(done.line())
    return 0


def _mix_config(args: argparse.Namespace) -> int:
    keep = [dolma.Selection.parse(text) for text in args.keep]
    config = dolma.mix_config(
        args.run_dir,
        keep,
        args.output,
        min_prob=args.min_prob,
        stream=args.stream,
        processes=args.processes,
    )
    text = dolma.mix_yaml(config, dolma.store_options(args.run_dir))
    if args.out is None:
        print(text, end="")
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        said = f"wrote {args.out}: run it with `dolma -c {args.out} mix`"
        if text.startswith("#"):
            said += " in the environment its first lines name (dolma's own S3 client)"
        print(said, file=sys.stderr)
    return 0
