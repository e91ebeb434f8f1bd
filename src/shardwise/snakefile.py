"""What the Snakefile and its rules import from shardwise, in one place.

The Snakefile stays a table of contents: it validates the config, calls
:func:`prepare_run` once at parse time and includes the rules; the rules' input
functions and resource callables are the other names here. This module (with
``cli``) is the top floor: it may import every layer, and nothing imports it.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from shardwise.config import reject_secret_keys
from shardwise.ops.planning import report_lines
from shardwise.planner import prepare
from shardwise.planner.inflight import Submitter
from shardwise.planner.prepare import RunInfo, is_dry_run
from shardwise.planner.walltime import runtime_minutes_for
from shardwise.slurm.profile import site_resources
from shardwise.slurm.submiterrors import show_submit_errors

__all__ = [
    "RunInfo",
    "Submitter",
    "is_dry_run",
    "prepare_run",
    "reject_secret_keys",
    "runtime_minutes_for",
    "show_submit_errors",
    "site_resources",
]


def prepare_run(
    config: dict[str, Any],
    *,
    main_process: bool,
    dryrun: bool = False,
    report: bool = True,
    out: IO[str] | None = None,
    repin: bool = False,
    submitter: Submitter | None = None,
) -> RunInfo:
    """Plan (top-level process) or read (cluster job) the run, and print what planning found.

    The top-level process prints the planning report (notes, coverage, in-flight shards)
    to ``out`` (stderr by default) unless ``report`` is off; a cluster job prints nothing.
    """
    info = prepare.prepare_run(
        config, main_process=main_process, dryrun=dryrun, repin=repin, submitter=submitter
    )
    if main_process and report:
        stream = out or sys.stderr
        stream.write("".join(f"{line}\n" for line in report_lines(info)))
        stream.flush()
    return info
