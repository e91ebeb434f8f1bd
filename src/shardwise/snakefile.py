"""What the Snakefile and its rules import from shardwise, in one place (the top floor,
with ``cli``): the Snakefile stays a table of contents that calls :func:`prepare_run`."""

import sys
from pathlib import Path
from typing import IO, Any

from shardwise.config import reject_secret_keys
from shardwise.errors import ShardwiseError
from shardwise.planner import prepare
from shardwise.planner.inflight import Submitter
from shardwise.planner.prepare import RunInfo, is_dry_run
from shardwise.planner.walltime import runtime_minutes_for
from shardwise.run import selection
from shardwise.runtime.dryrun import report_lines
from shardwise.runtime.host import Runtime
from shardwise.runtime.submiterrors import show_submit_errors
from shardwise.slurm.profile import site_resources

__all__ = [
    "RunInfo", "Runtime", "Submitter", "classify_group_size", "is_dry_run", "prepare_run",
    "reject_secret_keys", "runtime_minutes_for", "selection_targets", "show_submit_errors",
    "site_resources",
]  # fmt: skip


def prepare_run(
    config: dict[str, Any],
    *,
    main_process: bool,
    dryrun: bool = False,
    report: bool = True,
    out: IO[str] | None = None,
    repin: bool = False,
    submitter: Submitter | None = None,
    exit_on_refusal: bool = False,
) -> RunInfo:
    """Plan (top-level process) or read (cluster job) the run, and print the planning report
    to ``out`` (stderr). With ``exit_on_refusal`` (the Snakefile) a refusal is one line and
    exit 1, not Snakemake's frames of package code; any other exception is a bug: traceback."""
    try:
        info = prepare.prepare_run(
            config, main_process=main_process, dryrun=dryrun, repin=repin, submitter=submitter
        )
    except ShardwiseError as e:
        if not exit_on_refusal:
            raise
        sys.stderr.write(f"shardwise: {e}\n")
        sys.stderr.flush()
        raise SystemExit(1) from None
    if main_process and report:
        stream = out or sys.stderr
        stream.write("".join(f"{line}\n" for line in report_lines(info)))
        stream.flush()
    return info


def selection_targets(run_dir: str) -> list[str]:
    """``select_all``'s targets: every planned selection's shard records (a plan file
    per selection read at parse time: small, and only once per selection)."""
    out = []
    for name in selection.names(Path(run_dir)):
        sel = selection.load_plan(Path(run_dir), name)
        if sel is not None:
            out += [str(selection.shard_path(Path(run_dir), name, s)) for s in sel.shards]
    return out


def classify_group_size(workflow: Any) -> int:
    """Shards per classify job: ``--group-components`` of the classify rule's group (its
    own ``classify``, or one a profile's ``groups`` names), 1 when jobs are not grouped
    (the local executor)."""
    groups = workflow.group_settings
    group = groups.overwrite_groups.get("classify", prepare.GROUP)
    local = not getattr(workflow, "non_local_exec_or_dryrun", True)
    return 1 if local else int(groups.group_components.get(group, 1))
