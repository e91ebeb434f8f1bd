"""A restarted workflow adopts the live jobs of an earlier invocation, never abandons them.

A main process that dies (``kill -9``, a lost login node, its own walltime) leaves its
jobs running and pending. The next invocation of the same run plans their shards as
adopted (``claims/adopted.json``): it submits nothing for them, and one ``adopt``
checkpoint per adopted job (a local job running :func:`wait` for that holder) keeps it
with the same keeper as its own jobs (:mod:`shardwise.runtime.keeper`) until it has
ended; each counts against ``jobs``. Meanwhile the walltime adaptation treats them as the
run's jobs. When one ends, its checkpoint finishes and Snakemake labels whatever that job
left at once, under the same rules as its own jobs, while the others still run.

Orphaned local shard processes (the local executor) are waited for the same way, by
their process identity.
"""

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO

from shardwise.run import claims, jobevents, markers, ranges
from shardwise.run.adoption import Adoption, Holder
from shardwise.run.jobevents import JobEvent, Kind
from shardwise.runtime.fates import Duty
from shardwise.runtime.keeper import PREFIX, Keeper


@dataclass
class AdoptedJobs:
    """The adopted SLURM jobs not yet ended (the keeper's
    :class:`~shardwise.runtime.keeper.Jobs`)."""

    pending: dict[str, tuple[int, ...]]
    ended: dict[str, bool] = field(default_factory=dict)

    def watched(self) -> dict[str, tuple[int, ...]]:
        return dict(self.pending)

    def end(self, job_id: str, *, done: bool, why: str) -> bool:  # why: the keeper prints it
        if self.pending.pop(job_id, None) is None:
            return False
        self.ended[job_id] = done
        return True


@dataclass(frozen=True, kw_only=True)
class Waited:
    """How the adoption ended."""

    jobs: int
    processes: int
    left: tuple[int, ...]  # adopted shards not marked done when the last holder ended
    orphaned: bool = False  # the workflow that started the wait died first


def wait(
    run_dir: Path,
    adoption: Adoption,
    *,
    every: float,
    main_alive: Callable[[], bool],
    out: IO[str] | None = None,
) -> Waited:
    """Keep the adopted holders until each has ended (or the workflow died)."""
    stream = out or sys.stderr
    jobs = AdoptedJobs({h.job_id: h.shards for h in adoption.holders if h.job_id})
    procs = [h for h in adoption.holders if h.job_id is None]
    keeper = Keeper(
        run_dir=run_dir, jobs=jobs, duty=Duty.adopted(), every=every, out=stream,
        what="adopted job",
    )  # fmt: skip
    _announce(run_dir, adoption, stream)
    while True:
        kept = keeper.check()
        procs = _living(run_dir, procs, stream)
        if not kept and not procs:
            break
        if not main_alive():
            return Waited(jobs=len(jobs.ended), processes=0, left=(), orphaned=True)
        time.sleep(every)
    done = markers.done_shards(run_dir)
    left = tuple(s for s in adoption.shards if s not in done)
    held = sum(1 for h in adoption.holders if h.job_id is None)
    return Waited(jobs=len(adoption.holders) - held, processes=held, left=left)


def _announce(run_dir: Path, adoption: Adoption, out: IO[str]) -> None:
    """One line for the adoption, one event per adopted job."""
    n = len(adoption.holders)
    who, it, its = (
        (adoption.holders[0].name(), "it", "its")
        if n == 1
        else (f"{n} live job(s)", "them", "their")
    )
    text = f"adopted {who} of an earlier invocation (shards "
    text += f"{ranges.compress(list(adoption.shards))}): this run keeps {it} as its own, fits "
    text += f"{its} walltime with its own, and labels what each leaves as soon as it ends"
    out.write(f"{PREFIX}{text}\n")
    out.flush()
    now = datetime.now().isoformat(timespec="seconds")
    for h in adoption.holders:
        if h.job_id:
            event = JobEvent(
                at=now, job_id=h.job_id, kind=str(Kind.ADOPTED), shards=h.shards,
                action="waited", text=f"{h.name()} adopted",
            )  # fmt: skip
            jobevents.append(run_dir, event)


def _living(run_dir: Path, procs: list[Holder], out: IO[str]) -> list[Holder]:
    """The local holders still running; one line for each that ended."""
    alive = []
    for h in procs:
        here = h.host == claims.hostname() and h.pid is not None
        if here and claims.process_alive(h.pid, h.process):
            alive.append(h)
            continue
        done = markers.done_shards(run_dir)
        left = [s for s in h.shards if s not in done]
        tail = f"{len(left)} shard(s) left: this run labels them" if left else "its shards are done"
        out.write(f"{PREFIX}adopted {h.name()} (shards {ranges.compress(list(h.shards))}) ")
        out.write(f"ended: {tail}\n")
    return alive
