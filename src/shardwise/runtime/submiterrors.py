"""Make SLURM's own refusal message visible when a *group* job cannot be submitted.

The plugin (2.8.0) hands sbatch's stderr to ``job.log_error(msg)``, but Snakemake 9.27's
``GroupJob.log_error`` never uses ``msg`` (the console says ``message: None``), and every
classify job of the SLURM profile is a group job. :func:`show_submit_errors` wraps it in
the top-level process: the message is logged, and written into each member shard's log
that is absent or empty (it never ran), where ``show-failed-logs`` prints it.
"""

import contextlib
from pathlib import Path
from typing import Any

_MARK = "_shardwise_shows_msg"


def show_submit_errors(*, main_process: bool) -> bool:
    """Install the wrapper (top-level process only, once); True when installed."""
    if not main_process:
        return False
    try:
        from snakemake.jobs import GroupJob  # noqa: PLC0415 - ~0.1 s; Snakemake's own process only
        from snakemake.logging import logger  # noqa: PLC0415 - with GroupJob
    except ImportError:  # pragma: no cover - shardwise always runs with Snakemake
        return False
    original = GroupJob.log_error
    if getattr(original, _MARK, False):
        return True

    def log_error(self: Any, msg: Any = None, *args: Any, **kwargs: Any) -> Any:
        if msg:
            text = str(msg).strip()
            shards = ", ".join(str(j.wildcards_dict.get("shard", "?")) for j in self.jobs)
            logger.error(f"Error in group {self.groupid} (shards {shards}): {text}")
            for job in self.jobs:
                note_in_logs(job, text)
        return original(self, msg, *args, **kwargs)

    setattr(log_error, _MARK, True)
    log_error.__doc__ = original.__doc__
    GroupJob.log_error = log_error
    return True


def note_in_logs(job: Any, text: str) -> None:
    """Write ``text`` into the job's log files that are absent or empty (it never ran)."""
    for log in getattr(job, "log", None) or ():
        path = Path(str(log))
        with contextlib.suppress(OSError):
            if path.exists() and path.stat().st_size > 0:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"shardwise: this shard's SLURM job was not started:\n{text}\n")
