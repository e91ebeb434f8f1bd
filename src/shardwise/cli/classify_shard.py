"""``shardwise classify-shard``: label one logical shard (what the classify rule runs)."""

import argparse
import os
import signal
import sys

from shardwise.classify.preempted import requeue_if_preempted
from shardwise.classify.shard_job import Interrupted, install_signal_handlers, run_shard
from shardwise.cli.common import add_run_dir
from shardwise.run.claims import held

#: Exit status of a shard stopped by SIGTERM/SIGINT (128 + 15): it will be retried.
EXIT_INTERRUPTED = 143


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``classify-shard``."""
    p = sub.add_parser(
        "classify-shard",
        help="label one logical shard (the classify rule)",
        description="Label every unfinished, non-quarantined file of one shard, then mark "
        "the shard done. What the classify rule runs; exits 143 on SIGTERM.",
    )
    add_run_dir(p)
    p.add_argument("--shard", type=int, required=True, help="the logical shard to label")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Hold the shard's claim while labelling it; 143 when stopped by a signal."""
    install_signal_handlers()
    if not sys.stderr.isatty():  # a log file: no model-loading bars (read at import)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        with held(args.run_dir, args.shard):  # a live job on this shard: refuse, exit 1
            report = run_shard(args.run_dir, args.shard, progress=not args.no_progress)
    except Interrupted as e:
        print(f"shardwise: {e}", file=sys.stderr)
        for sig in (signal.SIGTERM, signal.SIGINT):  # SLURM repeats SIGTERM: finish the stop
            signal.signal(sig, signal.SIG_IGN)
        said = requeue_if_preempted(args.run_dir, args.shard)  # SLURM preempts: back in queue
        if said is not None:
            print(f"shardwise: {said}", file=sys.stderr)
        return EXIT_INTERRUPTED
    msg = f"shard {report.shard}: {report.files} file(s), {report.labelled} labelled, "
    print(msg + f"{report.skipped} already done, {report.docs} docs", file=sys.stderr)
    if report.half_on_cpu and report.labelled:  # stdout: the console (the log has stderr)
        text = f"shardwise: shard {report.shard} ran inference.dtype {report.half_on_cpu} on a CPU "
        text += "(inference.device auto found no GPU on this node): slower than float32, and "
        print(text + "its re-check runs documents again in float32; dtype auto avoids it")
    return 0
