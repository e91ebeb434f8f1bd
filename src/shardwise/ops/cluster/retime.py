"""``shardwise cluster retime``: shorten the run's queued jobs so they start before a window.

Lowering a pending job's limit in place keeps its place in the queue, which a cancel and
resubmit would lose. Only the run's own pending jobs that ask for more are touched
(decrease only), and the advice says what the next submissions should ask for.
"""

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from shardwise.errors import ConfigError
from shardwise.ops.cluster.asking import run_jobs
from shardwise.run import claims, ranges
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
        raise ConfigError(f"--max-minutes must be >= 1, got {max_minutes}")
    out = [
        Change(job.id, shards, job.time_limit_minutes, max_minutes)
        for job, shards in jobs.values()
        if job.pending and job.time_limit_minutes and job.time_limit_minutes > max_minutes
    ]
    return sorted(out, key=lambda c: (len(c.job_id), c.job_id))


class Status(StrEnum):
    """What became of one change (its value starts the line that says so)."""

    LOWERED = "lowered"
    WOULD_LOWER = "would lower"  # --dry-run
    REFUSED = "could not lower"  # SLURM refused it (problem says why)


@dataclass(frozen=True)
class Outcome:
    """One change, and whether SLURM took it."""

    change: Change
    status: Status
    problem: str = ""

    def line(self) -> str:
        """``lowered job 9 (shards 3): 240 -> 120 min`` (and SLURM's reason when refused)."""
        c = self.change
        what = f"job {c.job_id} (shards {ranges.compress(list(c.shards))}): "
        what += f"{c.minutes} -> {c.new_minutes} min"
        return f"{self.status} {what}" + (f": {self.problem}" if self.problem else "")


@dataclass(frozen=True)
class Retimed:
    """What ``cluster retime`` did: every change's outcome, or why the queue was unknown."""

    outcomes: tuple[Outcome, ...] = ()
    queue_problem: str | None = None  # squeue could not answer: nothing is known

    @property
    def failed(self) -> bool:
        """The exit decision: the queue unknown, or a change SLURM refused."""
        refused = any(o.status is Status.REFUSED for o in self.outcomes)
        return self.queue_problem is not None or refused

    def lines(self) -> list[str]:
        """One line per job, or the one line that says the queue could not be read."""
        if self.queue_problem is not None:
            return [f"cannot list your jobs (squeue): {self.queue_problem}"]
        return [o.line() for o in self.outcomes]


def apply(
    planned: list[Change], lower: Callable[[str, int], Answer[bool]], *, dry_run: bool
) -> list[Outcome]:
    """Lower each job's limit (or say what would be done), in order."""
    if dry_run:
        return [Outcome(c, Status.WOULD_LOWER) for c in planned]
    out = []
    for c in planned:
        done = lower(c.job_id, c.new_minutes)
        out.append(Outcome(c, Status.LOWERED if done.ok else Status.REFUSED, done.problem or ""))
    return out


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
) -> Retimed:
    """Find the run's queued jobs over ``max_minutes`` and lower them."""
    queue = queries.jobs(queries.current_user(), timeout=timeout)
    if not queue.ok:
        return Retimed(queue_problem=queue.problem)
    mine = run_jobs(Path(run_dir), queue.value or [], claims.Submitter.recorded(run_dir))
    return Retimed(tuple(apply(changes(mine, max_minutes), lower, dry_run=dry_run)))
