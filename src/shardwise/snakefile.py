"""What the Snakefile and its rules import from shardwise, in one place (the top floor,
with ``cli``): the Snakefile stays a table of contents that calls :func:`prepare_run`."""

import functools
import sys
import time
from pathlib import Path
from typing import IO, Any

from shardwise.config import Settings, reject_secret_keys
from shardwise.errors import ShardwiseError
from shardwise.ops import adapt, failed_jobs
from shardwise.ops.adapt import Adapter
from shardwise.ops.failed_jobs import FailureLog
from shardwise.ops.planning import report_lines
from shardwise.planner import prepare, walltime
from shardwise.planner.inflight import Submitter
from shardwise.planner.prepare import RunInfo, is_dry_run
from shardwise.planner.walltime import runtime_minutes_for
from shardwise.run import adaptation, selection
from shardwise.slurm.profile import site_resources
from shardwise.slurm.submiterrors import show_submit_errors

__all__ = [
    "FailureLog", "RunInfo", "Submitter", "WalltimeAdaptation", "classify_group_size",
    "is_dry_run", "prepare_run", "reject_secret_keys", "runtime_minutes_for",
    "selection_targets", "show_failed_jobs", "show_submit_errors", "site_resources",
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


def show_failed_jobs(
    workflow: Any, config: dict[str, Any], run: RunInfo, *, main_process: bool
) -> FailureLog | None:
    """Put a failed shard's reason on the console and stop early on a shared one (see
    ``ops/failed_jobs.py``); top-level process only. The log, for :func:`print_failures`."""
    if not main_process:
        return None
    stop_after = Settings.from_config(config).stop_after
    return failed_jobs.install(workflow, run.run_dir, stop_after=stop_after, now=time.time)


def print_failures(book: FailureLog | None, out: IO[str] | None = None) -> None:
    """The run's failed shards, one line per reason with its count (the ``onerror`` hook)."""
    if book is None:
        return
    stream = out or sys.stderr
    stream.write("".join(f"shardwise: {line}\n" for line in book.summary()))
    stream.flush()


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
    """Shards per classify job: ``--group-components`` of the classify rule's group (the
    profile's ``groups: classify: classify``), 1 when it is not grouped."""
    groups = workflow.group_settings
    group = groups.overwrite_groups.get("classify")
    return int(groups.group_components.get(group, 1)) if group else 1


class WalltimeAdaptation:
    """The walltime adaptation of one invocation (``ops/adapt.py``). Made at parse time,
    started by the Snakefile's ``onstart`` (only then does the workflow know its executor)
    and stopped by ``onsuccess``/``onerror``."""

    def __init__(self, config: dict[str, Any], run: RunInfo, *, main_process: bool) -> None:
        self.config, self.run, self.main_process = config, run, main_process
        self.adapter: Adapter | None = None

    def start(self, workflow: Any) -> Adapter | None:
        """Start adapting in the top-level process of a real run when ``walltime.adapt`` is
        on (``auto``: with the SLURM executor); else clear a fit an earlier invocation left,
        so the next submissions ask for the configured limits."""
        if not self.main_process or is_dry_run(workflow):
            return None
        settings = Settings.from_config(self.config)
        mode = settings.walltime.get("adapt", "auto")
        plugin = getattr(workflow, "executor_plugin", None)
        on_slurm = plugin is not None and "slurm" in str(getattr(plugin, "name", ""))
        if mode is False or (mode == "auto" and not on_slurm):
            record = adaptation.load(self.run.run_dir)
            if record is not None and record.fit is not None:
                adaptation.save(self.run.run_dir, type(record)(None, record.events))
            return None
        knobs = adapt.AdaptSettings(
            check_seconds=float(settings.walltime.get("adapt_check_seconds", 60)),
            probe_seconds=float(settings.walltime.get("adapt_probe_seconds", 300)),
            floor=functools.partial(walltime.one_file_minutes, settings),
        )
        self.adapter = Adapter(run_dir=self.run.run_dir, settings=knobs)
        self.adapter.start()
        return self.adapter

    def stop(self) -> None:
        """Stop after the round in progress (the thread is a daemon: an exit ends it too)."""
        if self.adapter is not None:
            self.adapter.close()
