"""``shardwise cluster retime``: shorten the run's queued jobs so they start before a window.

When the run's jobs pend behind a maintenance window, ``cluster status`` finds the
longest time limit that starts now. Cancelling and resubmitting would lose the jobs'
places in the queue; lowering their limit in place does not. This lowers the limit of
each of the run's *pending* jobs that asks for more (decrease only; jobs of other
workflows and users are never touched) and says what else to change: the config, so
that the next submissions ask for the same, and what happens to a shard cut short.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shardwise.errors import ConfigError
from shardwise.ops.cluster_status import run_jobs
from shardwise.planner import inflight
from shardwise.run import ranges
from shardwise.slurm import queries
from shardwise.slurm.queries import Answer


@dataclass(frozen=True)
class Change:
    """One queued job of the run whose limit is lowered."""

    job_id: str
    shards: tuple[int, ...]
    minutes: int  # its limit now
    new_minutes: int


def changes(jobs: dict[str, tuple[queries.Job, tuple[int, ...]]], max_minutes: int) -> list[Change]:
    """The run's pending jobs that ask for more than ``max_minutes``, oldest id first."""
    if max_minutes < 1:
        msg = f"--max-minutes must be >= 1, got {max_minutes}"
        raise ConfigError(msg)
    out = [
        Change(job.id, shards, job.time_limit_minutes, max_minutes)
        for job, shards in jobs.values()
        if job.pending and job.time_limit_minutes and job.time_limit_minutes > max_minutes
    ]
    return sorted(out, key=lambda c: (len(c.job_id), c.job_id))


def apply(
    planned: list[Change], lower: Callable[[str, int], Answer[bool]], *, dry_run: bool
) -> list[str]:
    """Lower each job's limit (or say what would be done); one line per job."""
    lines = []
    for c in planned:
        what = (
            f"job {c.job_id} (shards {ranges.compress(list(c.shards))}): "
            f"{c.minutes} -> {c.new_minutes} min"
        )
        if dry_run:
            lines.append(f"would lower {what}")
            continue
        done = lower(c.job_id, c.new_minutes)
        lines.append(f"lowered {what}" if done.ok else f"could not lower {what}: {done.problem}")
    return lines


def advice(planned: list[Change], max_minutes: int) -> list[str]:
    """What to change for the next submissions, and what happens to a shard cut short."""
    k = max((len(c.shards) for c in planned), default=1) or 1
    per_shard = max(1, max_minutes // k)
    return [
        f"next submissions: set walltime.max_minutes: {per_shard} in the config (a job of "
        f"{k} shard(s) then asks for at most {per_shard * k} min), or fewer shards per job "
        "(--group-components classify=N), until the window has passed",
        "a shard the shorter limit cuts short gets SIGTERM: its finished files stay done, it "
        "is recorded as interrupted, and it resumes on its retry",
        "a job that cannot start now (its GPUs busy) starts later with less time before the "
        "window: run `shardwise cluster status` again and retime what still pends",
    ]


def retime(
    run_dir: Path,
    max_minutes: int,
    lower: Callable[[str, int], Answer[bool]],
    *,
    dry_run: bool,
    timeout: float,
) -> tuple[list[Change], list[str]]:
    """Find the run's queued jobs over ``max_minutes`` and lower them; (changes, lines).

    No changes and one line when squeue cannot answer."""
    queue = queries.jobs(queries.current_user(), timeout=timeout)
    if not queue.ok:
        return [], [f"cannot list your jobs (squeue): {queue.problem}"]
    mine = run_jobs(Path(run_dir), queue.value or [], inflight.Submitter.recorded(run_dir))
    planned = changes(mine, max_minutes)
    return planned, apply(planned, lower, dry_run=dry_run)
