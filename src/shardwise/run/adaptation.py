"""What the workflow's walltime adaptation changed, when and why: ``<run_dir>/walltime-adapt.json``.

Written by the adapting workflow (``runtime/adapt.py``), read by the classify rule's runtime
(``planner/walltime.py``: the next submissions ask for no more than the fit), by
``cluster status`` and by ``coverage``. ``fit`` is the limit in force: jobs should end by
its ``horizon`` (SLURM's plan when it was probed) and never ask for less than ``floor``
minutes (what one file needs); None: the configured limits. ``events``: the last
:data:`KEEP` changes, each with the line the console showed.
"""

from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from shardwise.errors import RecordError
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic

ADAPT_JSON = "walltime-adapt.json"
#: Events kept (a campaign of weeks adapts a few times a day).
KEEP = 200


@dataclass(frozen=True, kw_only=True)
class Fit:
    """The limit in force: what ends by ``horizon`` (ISO local time), never below ``floor``;
    ``minutes``: the limit SLURM's plan started at ``since`` (queued jobs are lowered to it)."""

    horizon: str
    minutes: int
    floor: int
    since: str
    reason: str

    def minutes_left(self, now: datetime) -> int:
        """Whole minutes from ``now`` to the horizon (negative once it has passed)."""
        return int((datetime.fromisoformat(self.horizon) - now).total_seconds() // 60)

    def cap(self, now: datetime) -> int | None:
        """The most a job submitted ``now`` may ask for; None once not even ``floor`` fits."""
        left = self.minutes_left(now)
        return left if left >= self.floor else None


@dataclass(frozen=True, kw_only=True)
class Event:
    """One change: ``action`` (fitted, lowered, refused, waiting, expired, restored,
    cleared; ``probed``: the same wait again, recorded for its cost but not printed), the
    console's line, the limit it set, the jobs it changed, and what a probe of SLURM's plan
    cost (its SLURM calls, seconds and the probe jobs it submitted)."""

    at: str
    action: str
    text: str
    minutes: int | None = None
    jobs: tuple[str, ...] = ()
    probe_calls: int = 0
    probe_seconds: float = 0.0
    probe_jobs: int = 0


@dataclass(frozen=True)
class Adaptation:
    """The whole file."""

    fit: Fit | None = None
    events: tuple[Event, ...] = ()
    format_version: int = 1
    #: When the workflow that adapts now began (ISO local time): ``cluster status`` leaves
    #: the probing to a live workflow that began adapting after it started.
    since: str | None = None

    def with_event(self, event: Event, fit: Fit | None) -> Self:
        """This record after ``event``, with ``fit`` in force."""
        return replace(self, fit=fit, events=(*self.events, event)[-KEEP:])

    def to_json(self) -> dict[str, Any]:
        """The file's JSON object."""
        return asdict(self)

    @classmethod
    def from_json(cls, fields: Fields) -> Self:
        """Read through :class:`Fields`: a damaged field is refused by name."""
        fit = fields.sub("fit").into(Fit) if fields.data.get("fit") is not None else None
        where = fields.where
        events = tuple(
            Fields(e, f"{where} [events][{i}]").into(Event)
            if isinstance(e, dict)
            else _refuse(where, i)
            for i, e in enumerate(fields.list("events", []))
        )
        return cls(fit, events, fields.count("format_version", 1), fields.str("since", None))


def _refuse(where: str, index: int) -> Event:
    raise RecordError(where, f"field 'events'[{index}] must be an object")


def path(run_dir: Path) -> Path:
    """Where the record lives."""
    return Path(run_dir) / ADAPT_JSON


def load(run_dir: Path) -> Adaptation | None:
    """The record, or None when the workflow never adapted (RecordError when damaged)."""
    where = path(run_dir)
    try:
        raw = where.read_bytes()
    except FileNotFoundError:
        return None
    return Adaptation.from_json(Fields.parse(raw, str(where)))


def save(run_dir: Path, record: Adaptation) -> None:
    """Replace the record atomically (a reader sees the old one or the new one)."""
    write_atomic(path(run_dir), json_bytes(record.to_json()))


def cap(run_dir: Path, now: datetime) -> int | None:
    """The most a classify job submitted ``now`` may ask for (None: the configured limit);
    an unreadable record caps nothing (the adapter lowers queued jobs anyway)."""
    try:
        record = load(run_dir)
    except RecordError:
        return None
    if record is None or record.fit is None:
        return None
    return record.fit.cap(now)
