"""``shardwise <verb>``: parse, make one package call, print.

Exit codes: 0 success, 1 a ShardwiseError (one line on stderr), 2 usage errors,
143 interrupted by SIGTERM (the shard will be retried).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from shardwise import __version__
from shardwise.errors import ShardwiseError


def _cmd_shard_of(args: argparse.Namespace) -> int:
    from shardwise.sharding import check_shard_params, shard_for_task

    total, minimum = check_shard_params(args.total_shards, args.minimum_shard_index)
    for task_id in args.ids:
        print(shard_for_task(task_id, total, minimum))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from shardwise.demo import write_demo

    config = write_demo(Path(args.dir))
    print(f"demo written to {args.dir}; run it with: snakemake --cores 2 --configfile {config}")
    return 0


def _cmd_classify_shard(args: argparse.Namespace) -> int:
    from shardwise.claims import held
    from shardwise.job import Interrupted, install_signal_handlers, run_shard

    install_signal_handlers()
    try:
        with held(Path(args.run_dir), args.shard):  # a live job on this shard: refuse, exit 1
            report = run_shard(Path(args.run_dir), args.shard, progress=not args.no_progress)
    except Interrupted as e:
        print(f"shardwise: {e}", file=sys.stderr)
        return 143
    print(
        f"shard {report.shard}: {report.files} file(s), {report.labelled} labelled, "
        f"{report.skipped} already done, {report.docs} docs",
        file=sys.stderr,
    )
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from shardwise.config import load_yaml
    from shardwise.workflow import prepare_run

    info = prepare_run(
        load_yaml(Path(args.configfile)), main_process=True, dryrun=True, repin=args.repin
    )
    print(f"{len(info.shards)} shards planned in {info.run_dir}")
    return 0


def _cmd_walltime(args: argparse.Namespace) -> int:
    from shardwise.config import Settings, load_yaml
    from shardwise.sharding import shard_range
    from shardwise.walltime import estimate

    settings = Settings.from_config(load_yaml(Path(args.configfile)))
    shards = list(shard_range(settings.total_shards, settings.minimum_shard_index))
    k = args.group_size
    for start in range(0, len(shards), k):
        group = [estimate(settings, s, args.attempt) for s in shards[start : start + k]]
        total = sum(e.minutes for e in group)
        print(f"group {start // k}: {total} min = " + " + ".join(str(e.minutes) for e in group))
        if args.verbose:
            for e in group:
                print("  " + e.explain())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (every subcommand listed in --help)."""
    parser = argparse.ArgumentParser(
        prog="shardwise",
        description="Hash-sharded GPU labelling of web corpora (Snakemake + SLURM).",
    )
    parser.add_argument("--version", action="version", version=f"shardwise {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "shard-of",
        help="print the logical shard of each task id",
        description="Print the logical shard of each task id, one per line: "
        "int(sha256(id)[:16], 16) %% total_shards + minimum_shard_index (NeMo Curator's rule).",
    )
    p.add_argument("--total-shards", type=int, required=True, help="the run's total_shards")
    p.add_argument(
        "--minimum-shard-index", type=int, default=0, help="the run's first shard (default 0)"
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="task ids (paths relative to the input)")
    p.set_defaults(func=_cmd_shard_of)

    p = sub.add_parser(
        "demo",
        help="write the demo corpus, tiny offline models and config",
        description="Write a small demo corpus (Parquet and JSONL), four tiny classifiers with "
        "random weights (built offline: their labels are meaningless) and DIR/config.yaml.",
    )
    p.add_argument("dir", help="folder to write (e.g. demo)")
    p.set_defaults(func=_cmd_demo)

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
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser(
        "classify-shard",
        help="label one logical shard (the classify rule)",
        description="Label every unfinished, non-quarantined file of one shard, then mark "
        "the shard done. What the classify rule runs; exits 143 on SIGTERM.",
    )
    p.add_argument("--run-dir", required=True, help="the run directory")
    p.add_argument("--shard", type=int, required=True, help="the logical shard to label")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_classify_shard)

    p = sub.add_parser(
        "walltime",
        help="the runtime each group of K shards would request",
        description="Print the SLURM runtime each group of K shards would request, computed "
        "from the input size and the speed measured so far (see walltime in the config).",
    )
    p.add_argument("--configfile", default="config/config.yaml", help="the run's config file")
    p.add_argument(
        "--group-size", "-k", type=int, default=1, help="shards per SLURM job (group-components)"
    )
    p.add_argument("--attempt", type=int, default=1, help="Snakemake attempt (multiplies it)")
    p.add_argument("--verbose", "-v", action="store_true", help="explain each shard's figure")
    p.set_defaults(func=_cmd_walltime)

    from shardwise import cluster, coverage, domains, quarantine, retry

    coverage.add_cli(sub)
    domains.add_cli(sub)
    retry.add_cli(sub)
    quarantine.add_cli(sub)
    cluster.add_cli(sub)
    try:
        from shardwise import report
    except ImportError:  # pragma: no cover - report needs matplotlib
        report = None
    if report is not None and hasattr(report, "add_cli"):
        report.add_cli(sub)
    try:
        from shardwise import verify
    except ImportError:
        verify = None
    if verify is not None and hasattr(verify, "add_cli"):
        verify.add_cli(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``shardwise`` console command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()
    except ShardwiseError as e:
        print(f"shardwise: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `shardwise coverage | head -1`: the reader took what it wanted and left; stop
        # quietly with success (no traceback). Point stdout at /dev/null so the
        # interpreter's final flush cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
