"""Start, stop and read a run's launcher chain (``shardwise launch``, ``--stop``,
``--status``). The chain's jobs are the user's jobs named :func:`run.launch.chain_name`;
what each generation did is ``launch/chain.jsonl``."""

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from shardwise.errors import ConfigError, ShardwiseError
from shardwise.ops.cluster.asking import run_jobs
from shardwise.ops.launch import request
from shardwise.run import claims, markers
from shardwise.run import launch as record
from shardwise.run.launch import ChainEvent, Launch, Step
from shardwise.slurm import command, control, queries


def now() -> str:
    """Local time, as every record of the run writes it."""
    return datetime.now().isoformat(timespec="seconds")


def chain_jobs(name: str, *, timeout: float = command.DEFAULT_TIMEOUT) -> list[queries.Job]:
    """The user's live jobs of the chain (launchers running and queued)."""
    queue = queries.jobs(timeout=timeout)
    if not queue.ok:
        raise ShardwiseError(f"cannot read the queue: {queue.problem}")
    return [j for j in queue.value or [] if j.name == name]


def start(launch: Launch, run_dir: Path) -> str:
    """Submit the chain's first launcher and its spares (``request.SPARES``, queued behind
    it: should it end in its first second, one of them starts and another still waits);
    the first one's job id. Refused while a launcher of this run is running or queued
    (one chain per run)."""
    live = chain_jobs(launch.name)
    if live:
        jobs = ", ".join(f"{j.id} {j.state}" for j in live)
        msg = f"a launcher chain of {run_dir} is live (job {jobs}): `shardwise launch --status "
        raise ConfigError(msg + f"--run-dir {run_dir}` shows it; --stop ends it")
    record.save(run_dir, launch)
    ids, problem = submit_launchers(launch, run_dir, 1 + request.SPARES)
    if not ids:
        raise ShardwiseError(f"sbatch refused the launcher: {problem}")
    first, spares = ids[0], ids[1:]
    text = f"submitted launcher job {first} ({launch.name}, {launch.time_minutes} min)"
    text += f" and spare(s) {', '.join(spares)} queued behind it" if spares else ""
    text += f" (sbatch refused the other spares: {problem})" if problem else ""
    record.append(run_dir, ChainEvent(at=now(), job_id=first, step=Step.SUBMITTED,
                                      detail=",".join(ids), text=text))  # fmt: skip
    return first


def submit_launchers(launch: Launch, run_dir: Path, count: int) -> tuple[list[str], str | None]:
    """Submit ``count`` launchers of the chain; their job ids, and why sbatch refused the
    rest (None: it refused none)."""
    ids: list[str] = []
    for _ in range(count):
        submitted = control.submit_batch(
            request.sbatch_options(launch, run_dir), request.job_command(launch, run_dir)
        )
        if not submitted.ok or not submitted.value:
            return ids, submitted.problem or "no job id"
        ids.append(submitted.value)
    return ids, None


@dataclass(frozen=True)
class Stopped:
    """What ``launch --stop`` did: the launchers it cancelled, and the run's shard jobs it
    left running."""

    cancelled: tuple[queries.Job, ...]
    shard_jobs: tuple[str, ...]
    problem: str | None = None


def stop(run_dir: Path) -> Stopped:
    """End the chain: mark it stopped (a launcher that starts now exits at once), then
    cancel its queued successor and its running launcher, whose Snakemake is killed
    without cancelling the shard jobs (SIGTERM reaches the launcher, which kills
    Snakemake with SIGKILL: the plugin's SIGINT path would cancel them)."""
    launch = record.load(run_dir)
    if launch is None:
        raise ConfigError(f"{record.launch_path(run_dir)}: no launcher chain was started here")
    record.save(run_dir, launch.stopped(now()))
    live = chain_jobs(launch.name)
    problem = None
    if live:
        done = control.cancel([j.id for j in live])
        problem = None if done.ok else done.problem
    text = "the chain was stopped (`shardwise launch --stop`)"
    record.append(run_dir, ChainEvent(at=now(), job_id="", step=Step.STOPPED, text=text))
    shard_jobs = tuple(sorted(_shard_jobs(run_dir)))
    return Stopped(cancelled=tuple(live), shard_jobs=shard_jobs, problem=problem)


def _shard_jobs(run_dir: Path) -> dict[str, queries.Job]:
    """The run's live shard jobs (what a stop leaves running)."""
    queue = queries.jobs()
    mine = run_jobs(run_dir, queue.value or [], claims.Submitter.recorded(run_dir))
    return {i: job for i, (job, _shards) in mine.items()} if queue.ok else {}


class State(StrEnum):
    """Where the chain stands."""

    RUNNING = "running"  # a launcher runs the workflow
    QUEUED = "queued"  # a launcher waits to start (its predecessor ends, or resources)
    COMPLETE = "complete"  # the workflow finished every target; nothing is queued
    STOPPED = "stopped"  # `launch --stop`
    ENDED = "ended"  # a launcher ended it (the workflow failed and made no progress)
    BROKEN = "broken"  # nothing queued or running, yet not complete, stopped or ended
    NONE = "none"  # never launched


@dataclass(frozen=True)
class Generation:
    """One launcher job, from its events."""

    job_id: str
    host: str = ""
    started_at: str = ""
    last: ChainEvent | None = None  # what it did last


@dataclass(frozen=True)
class ChainStatus:
    """The chain as ``launch --status`` shows it."""

    run_dir: Path
    launch: Launch | None
    state: State
    generations: tuple[Generation, ...]
    live: tuple[queries.Job, ...]
    last: ChainEvent | None
    shard_jobs: tuple[queries.Job, ...]
    done_shards: int
    #: How each launcher of the chain that is no longer live ended, by SLURM's
    #: accounting (``COMPLETED``, ``CANCELLED by 0``, ``TIMEOUT``...; absent: unknown).
    ended: dict[str, str] = field(default_factory=dict)

    @property
    def queued(self) -> tuple[queries.Job, ...]:
        """The launchers waiting to start."""
        return tuple(j for j in self.live if j.pending)


def status(run_dir: Path) -> ChainStatus:
    """Read the chain: its request, its generations, its live jobs, the run's jobs."""
    launch = record.load(run_dir)
    events = record.events(run_dir)
    live = tuple(chain_jobs(launch.name)) if launch is not None else ()
    shard_jobs = tuple(_shard_jobs(run_dir).values()) if launch is not None else ()
    last = events[-1] if events else None
    known = {e.job_id for e in events if e.job_id}
    known |= {i for e in events if e.step in _SUBMITS for i in e.detail.split(",") if i}
    gone = sorted(known - {j.id for j in live}, key=int)
    ended = queries.accounted_states(gone)
    return ChainStatus(
        run_dir=run_dir,
        launch=launch,
        state=state_of(launch, last, live),
        generations=generations(events),
        live=live,
        last=last,
        shard_jobs=shard_jobs,
        done_shards=len(markers.done_shards(run_dir)),
        ended=ended.value or {} if ended.ok else {},
    )


#: The events whose ``detail`` lists the launchers they submitted.
_SUBMITS = (Step.SUBMITTED, Step.SUCCESSOR)
#: The state a chain with no live launcher is in, by its last event's step.
_SETTLED = {Step.COMPLETE: State.COMPLETE, Step.ENDED: State.ENDED, Step.NO_SUCCESSOR: State.ENDED}


def state_of(
    launch: Launch | None, last: ChainEvent | None, live: tuple[queries.Job, ...]
) -> State:
    """The chain's state from its request, its last event and its live jobs."""
    if launch is None:
        return State.NONE
    if launch.stopped_at is not None:
        return State.STOPPED
    if live:
        return State.RUNNING if any(j.running for j in live) else State.QUEUED
    return _SETTLED.get(Step(last.step), State.BROKEN) if last is not None else State.BROKEN


def generations(events: list[ChainEvent]) -> tuple[Generation, ...]:
    """One entry per launcher that started, in order, with what it did last."""
    found: dict[str, Generation] = {}
    for e in events:
        if e.step == Step.STARTED:
            found[e.job_id] = Generation(e.job_id, e.host, e.at, e)
        elif e.job_id in found:
            g = found[e.job_id]
            found[e.job_id] = Generation(g.job_id, g.host, g.started_at, e)
    return tuple(found.values())
