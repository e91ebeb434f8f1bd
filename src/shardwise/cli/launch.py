"""``shardwise launch``: the workflow's main process as a self-renewing chain of SLURM jobs."""

import argparse
import os
import sys
from pathlib import Path

from shardwise.cli.common import positive_int
from shardwise.ops.launch import chain, request
from shardwise.ops.launch.generation import run_generation
from shardwise.ops.launch.render import status_text, stopped_text
from shardwise.run.launch import Launch, chain_name

#: The default lead of the walltime signal: Snakemake is stopped this long before the limit.
STOP_BEFORE_S = 300


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``launch``."""
    p = sub.add_parser(
        "launch",
        help="run the workflow as a SLURM CPU job that renews itself until the run is done",
        description="Run `snakemake <arguments>` as a chain of SLURM CPU jobs, one at a time "
        "per run (--dependency=singleton): each launcher queues its successor when it "
        "starts, stops Snakemake --stop-before seconds before its walltime without cancelling "
        "the shard jobs (the successor adopts them), and the launcher that sees the workflow "
        "finish cancels its successor. --status shows the chain; --stop ends it.",
        epilog="example: shardwise launch --time 480 --partition cpu -- --profile "
        "profiles/slurm --configfile my-run.yaml",
    )
    p.add_argument("--time", type=positive_int, help="each launcher's walltime, in minutes")
    p.add_argument("--partition", default="", help="the CPU partition (default: the cluster's)")
    p.add_argument(
        "--account",
        default=os.environ.get("SHARDWISE_SLURM_ACCOUNT", ""),
        help="the SLURM account (default: $SHARDWISE_SLURM_ACCOUNT)",
    )
    p.add_argument("--cpus", type=positive_int, default=2, help="CPUs per launcher (2)")
    p.add_argument("--mem-mb", type=positive_int, default=8000, help="memory per launcher (8000)")
    p.add_argument(
        "--stop-before",
        type=positive_int,
        default=STOP_BEFORE_S,
        help=f"stop Snakemake this many seconds before the walltime ({STOP_BEFORE_S}); SLURM "
        "may signal up to 60 s earlier",
    )
    p.add_argument("--run-dir", type=Path, help="the run directory (default: the config's)")
    p.add_argument("--status", action="store_true", help="show the chain and exit")
    p.add_argument("--stop", action="store_true", help="end the chain (shard jobs keep running)")
    p.add_argument("--generation", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="-- then snakemake's arguments")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Start, show or stop the chain; or, inside a launcher job, be one generation."""
    snakemake_args = list(args.snakemake_args)
    if snakemake_args[:1] == ["--"]:
        snakemake_args = snakemake_args[1:]
    run_dir = args.run_dir or request.run_dir_of(snakemake_args, Path.cwd())
    run_dir = Path(run_dir).resolve()
    if args.generation:
        return run_generation(run_dir)
    if args.status:
        print(status_text(chain.status(run_dir)))
        return 0
    if args.stop:
        print(stopped_text(chain.stop(run_dir), str(run_dir)))
        return 0
    if args.time is None:
        print("shardwise launch: --time MINUTES is required to start a chain", file=sys.stderr)
        return 2
    if not snakemake_args:
        print("shardwise launch: give snakemake's arguments after `--`", file=sys.stderr)
        return 2
    request.check_times(args.time, args.stop_before)
    launch = Launch(
        name=chain_name(run_dir),
        workdir=str(Path.cwd()),
        python=sys.executable,
        snakemake_args=tuple(snakemake_args),
        time_minutes=args.time,
        stop_before_seconds=args.stop_before,
        cpus=args.cpus,
        mem_mb=args.mem_mb,
        partition=args.partition,
        account=args.account,
        created_at=chain.now(),
    )
    job_id = chain.start(launch, run_dir)
    print(f"launcher job {job_id} submitted for {run_dir} ({launch.name}); it renews itself "
          f"every {args.time} min until the run is done; `shardwise launch --status --run-dir "
          f"{run_dir}` shows the chain, --stop ends it")  # fmt: skip
    return 0
