"""shardwise's executor plugin: the SLURM plugin's executor, with shardwise's runtime
attached through Snakemake's executor interface (``executor: shardwise`` in a profile).

Snakemake finds executor plugins by module name (``snakemake_executor_plugin_<name>``).
This one subclasses the SLURM plugin's ``Executor`` and keeps everything it does; it only
runs each status round (``check_active_jobs``) through the job keeper's
:class:`shardwise.snakefile.ExecutorJobs` and notes the jobs the plugin reported
(``report_job_success`` / ``report_job_error``). Its settings are the SLURM plugin's,
under this plugin's prefix: ``--shardwise-requeue``, profile key ``shardwise-requeue``
(a ``slurm-*`` key is not read with this executor: ``shardwise cluster check`` says so).
"""

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from snakemake_executor_plugin_slurm import Executor as SlurmExecutor
from snakemake_executor_plugin_slurm import ExecutorSettings as SlurmExecutorSettings
from snakemake_executor_plugin_slurm import common_settings as slurm_common_settings

from shardwise.snakefile import ExecutorJobs, attach_executor

#: Submission, remote execution and the job step are the SLURM plugin's.
common_settings = slurm_common_settings


@dataclass
class ExecutorSettings(SlurmExecutorSettings):
    """The SLURM plugin's settings, read as ``--shardwise-<name>`` (the plugin's prefix)."""


class Executor(SlurmExecutor):
    """The SLURM executor; each status round also carries the job keeper's word."""

    def __init__(self, workflow: Any, logger: Any) -> None:
        # before super().__init__: it starts the thread that calls check_active_jobs
        self.shardwise_jobs = ExecutorJobs(self)
        super().__init__(workflow, logger)
        attach_executor(workflow, self.shardwise_jobs)

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
