"""shardwise's executor plugin: the SLURM plugin's executor, with shardwise's runtime
attached through Snakemake's executor interface (``executor: shardwise`` in a profile).

Snakemake finds executor plugins by module name (``snakemake_executor_plugin_<name>``).
This one subclasses the SLURM plugin's ``Executor`` and keeps everything it does. It
hosts shardwise's runtime (``shardwise/runtime/host.py``: the Snakefile's ``RUNTIME``):
once made it hands the runtime its jobs, which starts the job keeper and the walltime
adaptation, and its ``shutdown()`` stops them; each status round (``check_active_jobs``)
runs through the keeper's :class:`shardwise.runtime.host.ExecutorJobs`, which notes the
jobs the plugin reported (``report_job_success`` / ``report_job_error``). Its settings
are the SLURM plugin's, under this plugin's prefix: ``--shardwise-requeue``, profile key
``shardwise-requeue``. The SLURM plugin's own spelling (``slurm-status-command``, as
users' profiles carry it) is read with the same meaning, said in one line; the two
spellings with different values stop the run at its start, naming both.
"""

import contextlib
import dataclasses
import io
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from snakemake_executor_plugin_slurm import Executor as SlurmExecutor
from snakemake_executor_plugin_slurm import ExecutorSettings as SlurmExecutorSettings
from snakemake_executor_plugin_slurm import common_settings as slurm_common_settings
from snakemake_interface_common.exceptions import WorkflowError

#: Submission, remote execution and the job step are the SLURM plugin's.
common_settings = slurm_common_settings


@dataclass
class ExecutorSettings(SlurmExecutorSettings):
    """The SLURM plugin's settings, read as ``--shardwise-<name>`` (the plugin's prefix)."""


class Executor(SlurmExecutor):
    """The SLURM executor; each status round also carries the job keeper's word."""

    def __init__(self, workflow: Any, logger: Any) -> None:
        # shardwise loads here, where this executor runs: Snakemake imports every installed
        # executor plugin at every start (job steps too), so the module stays light and a
        # broken import of ours never breaks another workflow's snakemake
        from shardwise.runtime.host import ExecutorJobs, runtime_of  # noqa: PLC0415

        # before super().__init__: it reads the settings and starts the thread that calls
        # check_active_jobs
        read_slurm_spelling(workflow.executor_settings)
        self.shardwise_jobs = ExecutorJobs(self)
        super().__init__(workflow, logger)
        self.shardwise_runtime = runtime_of(workflow)  # None: a Snakefile not shardwise's
        if self.shardwise_runtime is not None:
            self.shardwise_runtime.host(workflow, self.shardwise_jobs)

    def shutdown(self) -> None:
        """Stop the runtime this executor hosts (the keeper, the adaptation), then shut
        down as the SLURM plugin does."""
        if self.shardwise_runtime is not None:
            self.shardwise_runtime.stop()
        super().shutdown()

    async def check_active_jobs(self, active_jobs: list[Any]) -> AsyncIterator[Any]:
        """The SLURM plugin's round, then the keeper's word (ends it saw, dropped jobs)."""
        async for info in self.shardwise_jobs.round(active_jobs, super().check_active_jobs):
            yield info

    def report_job_success(self, job_info: Any) -> None:
        """Report as the plugin does, noting the job (a reported job is not yielded again)."""
        self.shardwise_jobs.note_reported(job_info)
        super().report_job_success(job_info)

    def report_job_error(self, job_info: Any, msg: str | None = None, **kwargs: Any) -> None:
        """Report as the plugin does, noting the job."""
        self.shardwise_jobs.note_reported(job_info)
        super().report_job_error(job_info, msg=msg, **kwargs)


def read_slurm_spelling(settings: Any, argv: list[str] | None = None) -> None:
    """Give ``settings`` the SLURM plugin's options spelled ``slurm-<name>`` (profile or
    command line) that were not given as ``shardwise-<name>``; refuse the two spellings
    with different values. Snakemake's own parse of this command line (``argv``, default
    ``sys.argv``) says what was given; where it cannot be parsed again, nothing is read."""
    from snakemake import cli  # noqa: PLC0415 - its import collects the plugins, this one too

    from shardwise.slurm import profile  # noqa: PLC0415 - only where this executor runs

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # its "Using profile ..." again
            _parser, args = cli.parse_args(argv if argv is not None else sys.argv[1:])
    except (Exception, SystemExit):  # noqa: BLE001 - an API run: nothing to read
        return
    names = [f.name for f in dataclasses.fields(settings)]
    spelling = profile.slurm_spelling(args, names, unset=dataclasses.MISSING)
    if spelling.conflicts:
        raise WorkflowError(spelling.refusal())
    for name, value in spelling.adopted.items():
        setattr(settings, name, value)
    if spelling.adopted:
        sys.stderr.write(spelling.line() + "\n")
