"""``shardwise cluster check|status|retime``: the command line only (parse, one call, print).

The work is in :mod:`shardwise.ops.cluster.check` and :mod:`shardwise.ops.cluster.status`.
"""

import argparse
import sys
import time
from pathlib import Path

from shardwise.cli.common import add_format, add_run_dir, emit, json_text, positive_int
from shardwise.ops.cluster import check as cluster_check
from shardwise.ops.cluster import render as cluster_status_format
from shardwise.ops.cluster import retime
from shardwise.ops.cluster import status as cluster_status
from shardwise.slurm import control

DEFAULT_PROFILE = "profiles/slurm"
DEFAULT_CONFIG = "config/config.yaml"


def _timeout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=positive_int,
        default=20,
        help="seconds each SLURM command may take (default 20)",
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``shardwise cluster`` (``check``, ``status``, ``retime``) to ``subparsers``."""
    parser = subparsers.add_parser(
        "cluster",
        help="check the cluster against the profile; live state of a run's SLURM jobs",
        description="SLURM operations: `check` before a run, `status` during one.",
    )
    sub = parser.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)

    _add_check(sub)
    _add_status(sub)
    _add_retime(sub)


def _add_check(sub: argparse._SubParsersAction) -> None:
    """``cluster check``."""
    p = sub.add_parser(
        "check",
        help="does this cluster fit the profile? one OK/WARN/FAIL row per finding, with fixes",
        description="Reads the cluster (scontrol, sinfo, sacctmgr, squeue) and the profile "
        "that would be used, and prints one row per finding: OK / WARN / FAIL, what was found, "
        "why it matters and the exact fix. Exit 0 when nothing FAILs, 1 otherwise.",
    )
    p.add_argument(
        "--profile",
        action="append",
        default=None,
        metavar="DIR",
        help=f"Snakemake profile directory, repeatable, merged like snakemake does "
        f"(default: {DEFAULT_PROFILE})",
    )
    p.add_argument(
        "--configfile",
        default=None,
        help=f"the run's config, for walltime.max_minutes and resources (default: "
        f"{DEFAULT_CONFIG} if present, else the schema defaults)",
    )
    p.add_argument(
        "--write-profile",
        default=None,
        metavar="DIR",
        help="write a site overlay profile to DIR/config.yaml with only the keys that fix "
        "what failed; use it as the last --profile",
    )
    add_format(p)
    _timeout_option(p)
    p.set_defaults(func=_check)


def _add_status(sub: argparse._SubParsersAction) -> None:
    """``cluster status``."""
    p = sub.add_parser(
        "status",
        help="live state of a run's SLURM jobs: counts, GPUs, pending reasons, walltime probe",
        description="The run's jobs (found by submit directory, Snakefile, config files and "
        "claims), running and pending counts, GPUs in use, submit slots against the cap, "
        "pending jobs grouped by reason with what to do, whether a shorter walltime would "
        "start now (sbatch --test-only; a hidden maintenance window may need a few 1-CPU "
        "allocations, given back at once and shown; while a job waits for a reservation, "
        "SLURM's own plan for short-lived probe jobs of its request, each running `true`, "
        "cancelled before the answer and shown), what the workflow's walltime adaptation "
        "changed, progress and the ETA at the GPUs running now, in-flight shards and "
        "unavailable nodes.",
    )
    add_run_dir(p, "cluster status")
    add_format(p)
    p.add_argument(
        "--watch",
        type=positive_int,
        default=None,
        metavar="SECONDS",
        help="redraw every SECONDS until Ctrl-C (plain text blocks when not a terminal; "
        "JSON Lines with --format json)",
    )
    p.add_argument(
        "--probe",
        action="store_true",
        help="ask SLURM's plan even while the workflow's own walltime fit is in force (by "
        "default its fit and evidence are the answer, and no probe job is submitted)",
    )
    _timeout_option(p)
    p.set_defaults(func=_status)


def _add_retime(sub: argparse._SubParsersAction) -> None:
    """``cluster retime``."""
    p = sub.add_parser(
        "retime",
        help="lower the time limit of the run's queued jobs in place (before a window)",
        description="For each of the run's pending SLURM jobs that asks for more than "
        "--max-minutes: `scontrol update JobId=<id> TimeLimit=<N>` (decrease only; the run's "
        "own jobs only; each change printed). The jobs keep their place in the queue and "
        "start before a maintenance window instead of after it. Prints the config change "
        "that makes the next submissions ask for the same. `cluster status` says which N.",
    )
    add_run_dir(p, "cluster retime")
    p.add_argument(
        "--max-minutes",
        type=positive_int,
        required=True,
        metavar="N",
        help="the new time limit of every queued job of the run that asks for more",
    )
    p.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
    _timeout_option(p)
    p.set_defaults(func=_retime)


def _check(args: argparse.Namespace) -> int:
    configfile = args.configfile or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None)
    run = cluster_check.check(
        args.profile or [DEFAULT_PROFILE],
        configfile,
        timeout=args.timeout,
        write_profile=Path(args.write_profile) if args.write_profile else None,
    )
    emit(args.format, run.to_dict, lambda _fmt: run.text())
    return 1 if run.failed else 0


def _status(args: argparse.Namespace) -> int:
    if not args.watch:
        status = cluster_status.status(args.run_dir, timeout=args.timeout, probe=args.probe)
        emit(
            args.format,
            lambda: cluster_status_format.to_dict(status),
            lambda _fmt: cluster_status_format.format_table(status),
        )
        return 0

    def render() -> str:
        status = cluster_status.status(args.run_dir, timeout=args.timeout, probe=args.probe)
        if args.format == "json":
            return json_text(cluster_status_format.to_dict(status), one_line=True)
        return cluster_status_format.format_table(status)

    tty = sys.stdout.isatty()
    try:
        while True:
            text = render()
            if tty and args.format == "table":
                sys.stdout.write("\x1b[H\x1b[2J" + text + "\n")
            elif args.format == "table":
                sys.stdout.write(text + f"\n--- next in {args.watch:g} s (Ctrl-C stops)\n")
            else:
                sys.stdout.write(text + "\n")
            sys.stdout.flush()
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


def _retime(args: argparse.Namespace) -> int:
    """Lower the queued jobs' limits (or say what would be); 1 when one could not be."""
    done = retime.retime(
        args.run_dir,
        args.max_minutes,
        lambda job_id, minutes: control.lower_time_limit(job_id, minutes, timeout=args.timeout),
        dry_run=args.dry_run,
        timeout=args.timeout,
    )
    for line in done.lines():
        print(line)
    if done.queue_problem is None and not done.outcomes:
        print(f"no queued job of the run asks for more than {args.max_minutes} min")
    elif done.outcomes:
        for line in retime.advice([o.change for o in done.outcomes], args.max_minutes):
            print(line)
    return 1 if done.failed else 0
