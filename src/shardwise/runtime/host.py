"""The runtime of one invocation's top-level process, behind one entry point (:class:`Runtime`):
the failed-job hook, the walltime adaptation (``runtime/adapt.py``) and the job keeper
(``runtime/keeper.py``).

The Snakefile makes it at parse time (``RUNTIME``). Where shardwise's executor plugin
runs the jobs (``executor: shardwise``), the executor hosts it: once made, it finds the
runtime in the Snakefile's own namespace (``workflow.globals``, :func:`runtime_of`),
hands it its jobs (:meth:`Runtime.host`: the keeper and the adaptation start there, with
the run) and stops it in the executor interface's ``shutdown()``. With another executor
the Snakefile's ``onstart`` starts the adaptation (and, on SLURM, says in one line that no
keeper runs); ``onsuccess``/``onerror`` stop it. Inside a cluster job, and in a dry run,
nothing runs.
"""

import functools
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import IO, Any

from shardwise.config import Settings
from shardwise.planner import walltime
from shardwise.planner.prepare import RunInfo, is_dry_run
from shardwise.run import adaptation
from shardwise.runtime import adapt, failed_jobs, versions
from shardwise.runtime.adapt import Adapter
from shardwise.runtime.failed_jobs import FailureLog
from shardwise.runtime.fates import Duty
from shardwise.runtime.keeper import Keeper
from shardwise.slurm import profile

#: The executor plugin's name (``snakemake_executor_plugin_shardwise``, ``executor: shardwise``).
PLUGIN_NAME = "shardwise"
#: The name the Snakefile gives its runtime (where the executor finds it).
RUNTIME_NAME = "RUNTIME"


def show_failed_jobs(
    workflow: Any, config: dict[str, Any], run: RunInfo, *, main_process: bool
) -> FailureLog | None:
    """Put a failed shard's reason on the console and stop early on a shared one (see
    ``runtime/failed_jobs.py``); top-level process only. The log, for :func:`print_failures`."""
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


def signal_lead_s(workflow: Any) -> int:
    """Seconds before its limit a classify job is told to stop: the ``--signal=TERM@N`` of
    its ``slurm_extra`` (``set-resources`` for ``classify``, else ``default-resources``),
    :data:`profile.SIGNAL_LEAD_S` where neither says."""
    res = getattr(workflow, "resource_settings", None)
    given = [
        getattr(res, "overwrite_resources", {}).get("classify", {}),
        getattr(res, "default_resources", None) or {},
    ]
    for resources in given:
        extra = resources.get("slurm_extra") if hasattr(resources, "get") else None
        # a Resource's text as given (``raw``): its ``value`` is known only inside a rule
        lead = profile.signal_lead(str(getattr(extra, "raw", extra) or ""))
        if lead is not None:
            return lead
    return profile.SIGNAL_LEAD_S


class WalltimeAdaptation:
    """The walltime adaptation of one invocation (``runtime/adapt.py``). Made at parse time,
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
        mode = settings.walltime.adapt
        on_slurm = _on_slurm(workflow)
        if mode is False or (mode == "auto" and not on_slurm):
            record = adaptation.load(self.run.run_dir)
            if record is not None and record.fit is not None:
                adaptation.save(self.run.run_dir, type(record)(None, record.events))
            return None
        knobs = adapt.AdaptSettings(
            check_seconds=float(settings.walltime.adapt_check_seconds),
            probe_seconds=float(settings.walltime.adapt_probe_seconds),
            floor=functools.partial(
                walltime.one_file_minutes, settings, lead_s=signal_lead_s(workflow)
            ),
        )
        self.adapter = Adapter(run_dir=self.run.run_dir, settings=knobs)
        self.adapter.start()
        return self.adapter

    def stop(self) -> None:
        """Stop after the round in progress (the thread is a daemon: an exit ends it too)."""
        if self.adapter is not None:
            self.adapter.close()


class ExecutorJobs:
    """The jobs the SLURM executor waits for, as the job keeper sees them, and the keeper's
    word on their end, given to Snakemake inside the executor's own status check.

    Made by shardwise's executor plugin (``snakemake_executor_plugin_shardwise``: the SLURM
    plugin's ``Executor`` subclassed, selected by ``executor: shardwise`` in the profile):
    its ``check_active_jobs`` (Snakemake's executor interface: each round it yields the
    jobs still running and reports the others) runs each round through :meth:`round`. A
    job the keeper ended is reported there, as the plugin reports one
    (``report_job_success`` / ``report_job_error``), and a job the plugin dropped without a
    report is yielded again: plugin 2.8.0 drops every job it is checking when its status
    command fails its ``status-attempts`` times in a row (a controller restart), and
    Snakemake would wait for them forever. Once the keeper runs, the plugin's wait between
    two rounds is kept at most ``failures.watch_seconds`` (:attr:`cap`, through the
    interface's ``next_seconds_between_status_checks``; the plugin lets it grow to 180 s)."""

    def __init__(self, executor: Any) -> None:
        self.executor = executor
        self.cap: float | None = None  # the keeper's watch_seconds, once it runs
        self.lock = threading.Lock()
        self.known: dict[str, Any] = {}  # SLURM job id -> SubmittedJobInfo, last round
        self.ends: dict[str, tuple[bool, str]] = {}  # the keeper's word, for the next round
        self.ended: set[str] = set()  # jobs whose end the keeper's word reported
        self.reported: set[int] = set()

    async def round(
        self, active_jobs: list[Any], checked: Callable[[list[Any]], AsyncIterator[Any]]
    ) -> AsyncIterator[Any]:
        """One status round: the plugin's (``checked``), then the keeper's word."""
        self.reported.clear()
        with self.lock:
            self.known = {str(i.external_jobid): i for i in active_jobs if i.external_jobid}
        still = [info async for info in checked(active_jobs)]
        ids = {id(i) for i in still}
        dropped = [i for i in active_jobs if id(i) not in ids and id(i) not in self.reported]
        for info in still + dropped:
            with self.lock:
                end = self.ends.pop(str(info.external_jobid), None)
                if end is not None:
                    self.ended.add(str(info.external_jobid))
            if end is None:
                yield info
            elif end[0]:
                self.executor.report_job_success(info)
            else:
                msg = f"SLURM job {info.external_jobid} {end[1]}. "
                self.executor.report_job_error(info, msg=msg)
        if self.cap is not None:
            wait = self.executor.next_seconds_between_status_checks
            self.executor.next_seconds_between_status_checks = min(wait, self.cap)

    def note_reported(self, info: Any) -> None:
        """The executor reported this job's end (success or error) in this round."""
        self.reported.add(id(info))

    def _infos(self) -> dict[str, Any]:
        """The jobs being waited for: the last round's and those submitted since."""
        with self.executor.lock:
            infos = {str(i.external_jobid): i for i in self.executor.active_jobs}
        with self.lock:
            return {**self.known, **infos}

    def watched(self) -> dict[str, tuple[int, ...]]:
        return {k: _shards_of(i.job) for k, i in self._infos().items() if k != "None"}

    def end(self, job_id: str, *, done: bool, why: str) -> bool:
        """Have the executor's next round report the job's end (once)."""
        if job_id not in self._infos():
            return False
        with self.lock:
            if job_id in self.ends or job_id in self.ended:
                return False
            self.ends[job_id] = (done, why)
        return True


def _shards_of(job: Any) -> tuple[int, ...]:
    """The shards of a Snakemake job or group job (its classify members' wildcard)."""
    members = list(job) if job.is_group() else [job]
    found = (getattr(m, "wildcards", {}).get("shard") for m in members)
    return tuple(sorted(int(s) for s in found if s is not None and str(s).isdigit()))


class JobKeeping:
    """The job keeper of one invocation (``runtime/keeper.py``): it keeps the jobs of
    shardwise's executor, which hosts it (:meth:`Runtime.host`); the local executor's jobs
    are processes, and the SLURM plugin alone has no seam for it."""

    def __init__(self, config: dict[str, Any], run: RunInfo, *, main_process: bool) -> None:
        self.config, self.run, self.main_process = config, run, main_process
        self.keeper: Keeper | None = None

    def start(self, workflow: Any, jobs: ExecutorJobs | None) -> Keeper | None:
        """Keep ``jobs`` (shardwise's executor's; None with another executor) in a real run
        on SLURM; on SLURM without shardwise's executor, say in one line that nothing
        keeps them."""
        if not self.main_process or is_dry_run(workflow):
            return None
        on_slurm = _on_slurm(workflow)
        for line in versions.untested() if on_slurm else []:
            _say(line)
        if jobs is None:
            if on_slurm:
                _say(keeper_off_line(_executor_name(workflow)))
            return None
        settings = workflow.executor_settings
        duty = Duty.own(plugin_requeue=bool(getattr(settings, "requeue", False)))
        every = Settings.from_config(self.config).watch_seconds
        jobs.cap = every
        self.keeper = Keeper(run_dir=self.run.run_dir, jobs=jobs, duty=duty, every=every)
        self.keeper.start()
        return self.keeper

    def stop(self) -> None:
        """Stop after the round in progress."""
        if self.keeper is not None:
            self.keeper.close()


class Runtime:
    """What runs beside the workflow in its top-level process, behind one entry point: the
    failed-job hook (installed at parse time: it wraps Snakemake's job error log), the
    walltime adaptation and the job keeper (the module docstring says who starts them and
    when), and their end. Inside a cluster job, and in a dry run, nothing."""

    def __init__(self, workflow: Any, config: dict[str, Any], run: RunInfo) -> None:
        main = bool(workflow.is_main_process)
        self.failures = show_failed_jobs(workflow, config, run, main_process=main)
        self.adapting = WalltimeAdaptation(config, run, main_process=main)
        self.keeping = JobKeeping(config, run, main_process=main)
        self.jobs: ExecutorJobs | None = None  # shardwise's executor's, once it hosts this
        self.started = False

    def host(self, workflow: Any, jobs: ExecutorJobs) -> None:
        """Called by shardwise's executor once it exists (before ``onstart``): its jobs are
        the keeper's, and the adaptation and the keeper start now."""
        self.jobs = jobs
        self.start(workflow)

    def start(self, workflow: Any) -> None:
        """Start the adaptation and the keeper, once: by the executor that hosts this, else
        by the ``onstart`` hook."""
        if self.started:
            return
        self.started = True
        self.adapting.start(workflow)
        self.keeping.start(workflow, self.jobs)

    def stop(self, *, failed: bool = False) -> None:
        """The executor's ``shutdown()``, or the ``onsuccess`` / ``onerror`` hook (``failed``:
        the failures' summary too); stopping twice is stopping once."""
        self.adapting.stop()
        self.keeping.stop()
        if failed:
            print_failures(self.failures)


def runtime_of(workflow: Any) -> Runtime | None:
    """The runtime the Snakefile made (``RUNTIME`` in its namespace), if it made one."""
    found = getattr(workflow, "globals", {}).get(RUNTIME_NAME)
    return found if isinstance(found, Runtime) else None


def _executor_name(workflow: Any) -> str:
    return str(getattr(getattr(workflow, "executor_plugin", None), "name", ""))


def _on_slurm(workflow: Any) -> bool:
    """The run submits SLURM jobs: the SLURM plugin, or shardwise's subclass of it."""
    return _executor_name(workflow) in ("slurm", PLUGIN_NAME)


def keeper_off_line(executor: str) -> str:
    """Why no job keeper runs beside a SLURM run whose executor is not shardwise's."""
    text = f"shardwise: the job keeper is off: this run's executor is '{executor}', not "
    text += f"'{PLUGIN_NAME}' (profiles/slurm sets `executor: {PLUGIN_NAME}`): a preempted, held "
    return text + "or vanished job may be waited for forever (docs/slurm.md, The job keeper)"


def _say(line: str) -> None:
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()
