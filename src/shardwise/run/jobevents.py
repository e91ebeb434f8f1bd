"""``<run_dir>/job-events.jsonl``: what SLURM did to the run's jobs, one line per event.

Preemptions, node failures, requeues, held and vanished jobs, and the jobs a restarted
workflow adopted: each is one :class:`JobEvent`, appended by the process that saw it
(the workflow's job keeper, or the adoption of an earlier invocation's jobs), with the
console line it printed. ``cluster status`` and ``coverage`` count them
(:func:`tally`). A torn line is skipped; a requeue seen by two processes is counted once
(one job's run number is one event).
"""

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Self

from shardwise.errors import RecordError
from shardwise.run import eventlog
from shardwise.run.record import Fields

EVENTS = "job-events.jsonl"


class Kind(StrEnum):
    """What happened to a job."""

    PREEMPTED = "preempted"  # SLURM preempted it (requeued by SLURM or by shardwise)
    NODE_FAIL = "node_fail"  # its node failed (NODE_FAIL, BOOT_FAIL)
    REQUEUED = "requeued"  # requeued for another reason (scontrol requeue, unknown)
    HELD = "held"  # SLURM held it after a requeue: cancelled so that Snakemake retries it
    ON_HOLD = "on_hold"  # its owner or an admin held it (scontrol hold): the run waits
    LOST = "lost"  # it left squeue before its end was seen
    ADOPTED = "adopted"  # a restarted workflow took over a job of an earlier invocation
    ENDED = "ended"  # an adopted job ended


@dataclass(frozen=True, kw_only=True)
class JobEvent:
    """One line of ``job-events.jsonl``."""

    at: str  # ISO time, local
    job_id: str
    kind: str  # a Kind
    shards: tuple[int, ...] = ()
    state: str = ""  # the SLURM state seen
    partition: str = ""
    run: int = 0  # the job's run number (SLURM's restart count) the event is about
    action: str = ""  # what shardwise did: requeued, retried, cancelled, waited, ""
    text: str = ""  # the console line

    def to_json(self) -> str:
        """One line of JSON."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, line: str, where: str) -> Self:
        """One line; RecordError when it is torn or foreign."""
        event = Fields.parse(line, where).into(cls)
        if event.kind not in set(Kind):
            raise RecordError(where, f"field 'kind' must be one of {sorted(Kind)}")
        return event


def path(run_dir: Path) -> Path:
    """``<run_dir>/job-events.jsonl``."""
    return Path(run_dir) / EVENTS


def append(run_dir: Path, event: JobEvent) -> None:
    """Add one event (a line written whole by one ``write``; readers skip a torn one)."""
    eventlog.append(path(run_dir), event.to_json())


def load(run_dir: Path) -> list[JobEvent]:
    """Every readable event, oldest first (none when the file is absent)."""
    return eventlog.read(path(run_dir), JobEvent.from_json)


@dataclass(frozen=True, kw_only=True)
class Tally:
    """What the views say about the run's jobs: preemptions and lost jobs, all and lately."""

    preemptions: int = 0
    preemptions_last_hour: int = 0
    node_failures: int = 0
    requeued_other: int = 0
    held: int = 0
    lost: int = 0
    adopted: int = 0
    on_hold: int = 0  # jobs' runs held by their owner or an admin (not ended: waited for)
    first_at: str | None = None  # the first preemption

    @property
    def any(self) -> bool:
        """Whether SLURM ended or lost a job of the run outside its own plan."""
        return bool(
            self.preemptions or self.node_failures or self.lost or self.held or self.on_hold
        )

    def per_hour(self, now: datetime) -> float | None:
        """Preemptions per hour since the first one (None before any)."""
        if not self.preemptions or self.first_at is None:
            return None
        hours = max((now - datetime.fromisoformat(self.first_at)).total_seconds() / 3600, 1.0)
        return self.preemptions / hours


#: Kinds that say why a job's run ended and it went back to the queue: one per run, the
#: first of these a process recorded wins (the job itself knows it was preempted; the
#: keeper may only see that SLURM requeued it).
_REQUEUES = (Kind.PREEMPTED, Kind.NODE_FAIL, Kind.REQUEUED)


def tally(events: Iterable[JobEvent], now: datetime) -> Tally:
    """Count each job's run once per what happened to it, whichever process recorded it."""
    why: dict[tuple[str, int], Kind] = {}
    other: set[tuple[str, int, str]] = set()
    first: str | None = None
    recent = 0
    for e in events:
        kind = Kind(e.kind)
        if kind in _REQUEUES:
            known = why.get((e.job_id, e.run))
            if known is None or _REQUEUES.index(kind) < _REQUEUES.index(known):
                why[(e.job_id, e.run)] = kind
            if kind is Kind.PREEMPTED and known is not Kind.PREEMPTED:
                first = min(first or e.at, e.at)
                recent += _within(e.at, now, timedelta(hours=1))
        else:
            other.add((e.job_id, e.run, e.kind))
    counts = {k: sum(1 for v in why.values() if v is k) for k in _REQUEUES}
    rest = {k: sum(1 for _, _, kind in other if kind == k) for k in Kind}
    return Tally(
        preemptions=counts[Kind.PREEMPTED],
        preemptions_last_hour=recent,
        node_failures=counts[Kind.NODE_FAIL],
        requeued_other=counts[Kind.REQUEUED],
        held=rest[Kind.HELD],
        lost=rest[Kind.LOST],
        adopted=rest[Kind.ADOPTED],
        on_hold=rest[Kind.ON_HOLD],
        first_at=first,
    )


def _within(at: str, now: datetime, span: timedelta) -> bool:
    try:
        return now - datetime.fromisoformat(at) <= span
    except ValueError:
        return False
