"""SLURM's own plan for the run's request: the longest time limit that starts now.

On a busy cluster the cheap methods are blind: ``sbatch --test-only`` adds the pending
jobs ahead to every answer, and ``salloc --immediate`` is refused for priority while a
runnable job pends ahead (docs/cluster.md). The scheduler's own plan is not: a ladder of
real jobs of the run's own request (partition list, GPUs, CPUs, memory, constraint, QOS,
account), each running ``true``, submitted longest first so that no shorter one stands in
a longer one's way. After a backfill pass each has started (it ends at once), or pends
with a planned start, or pends because its limit runs into a reservation. A second
ladder refines between the longest that started and the next one up. Every probe is
cancelled or has ended before the answer, and carries a ``--deadline`` so that SLURM
removes it by itself within minutes if the caller is killed; a shorter limit starts
whenever a longer one does, so shorter probes are cancelled as soon as a longer starts.
"""

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from shardwise.slurm import command, control, pending, queries
from shardwise.slurm.queries import Answer


class Outcome(StrEnum):
    """What SLURM made of one probe."""

    STARTED = "started"  # it started (and ended: it runs `true`)
    PLANNED = "planned"  # it pends, and the backfill plan gives it a start
    RESERVED = "runs into a reservation"  # it pends: its limit crosses a reservation
    UNPLANNED = "not planned"  # it pends with no start in the plan before its deadline
    REFUSED = "refused"  # sbatch refused it (``reason`` says why)


@dataclass(frozen=True)
class Rung:
    """One limit of the ladder and what SLURM planned for a job asking for it."""

    minutes: int
    outcome: Outcome
    start: str | None = None  # ISO: when it started, or when the plan would start it
    reason: str = ""  # SLURM's pending reason, or sbatch's refusal


@dataclass(frozen=True, kw_only=True)
class Planned:
    """The answer: every rung asked (longest first), the longest limit that starts now
    (None: none down to ``floor``), and what the probe cost."""

    rungs: tuple[Rung, ...]
    longest_now: int | None
    floor: int
    calls: int
    seconds: float
    submitted: int
    started: int
    problem: str | None = None  # why the plan could not be asked (the submit cap, sbatch)
    at_cap: bool = False
    left: tuple[str, ...] = field(default_factory=tuple)  # probes still queued (should be none)
    waited: float = 0.0  # seconds it first waited for another process's probes to end

    def held_at(self, now: datetime) -> datetime:
        """When SLURM's plan gave the answer: the start of the longest probe that starts now
        (it started then, or the plan started it then). The limit holds from there, not from
        the probe's end, which came rounds of backfill passes later; ``now`` without one."""
        starts = [r.start for r in self.rungs if r.minutes == self.longest_now and r.start]
        return min((datetime.fromisoformat(s) for s in starts), default=now)

    def changed(self) -> str:
        """What the probe submitted and what became of it, for the answer's line."""
        if not self.submitted:
            return "nothing"
        text = f"{self.submitted} job(s) of your jobs' request named {control.PLAN_PROBE_NAME} "
        text += f"running `true` (--deadline): {self.started} started and ended at once, the "
        text += "others cancelled before the answer; no job of yours was touched"
        if self.waited >= 1:
            text += f"; it first waited {self.waited:g} s for another shardwise process's probes"
        return text

    def why_none(self) -> str:
        """Why no limit starts now, in SLURM's words."""
        if self.problem is not None:
            return self.problem
        lowest = min(self.rungs, key=lambda r: r.minutes, default=None)
        if lowest is None:
            return "nothing was asked"
        text = f"no limit down to {lowest.minutes} min starts now: "
        if lowest.outcome is Outcome.RESERVED:
            return text + "even that runs into a reservation (the window is open or about to)"
        if lowest.outcome is Outcome.PLANNED and lowest.start:
            when = lowest.start.replace("T", " ")
            return text + f"SLURM plans it for {when} ({lowest.reason or 'no reason given'})"
        return text + f"SLURM gives it no start yet ({lowest.reason or 'no reason given'})"


def ladder(own: int, floor: int) -> list[int]:
    """The limits to ask about, longest first: the job's own, halved down to ``floor``."""
    floor = max(1, min(floor, own))
    rungs, minutes = [own], own
    while minutes // 2 > floor:
        minutes //= 2
        rungs.append(minutes)
    if floor < rungs[-1]:
        rungs.append(floor)
    return rungs


def refine(low: int, high: int, parts: int = 4) -> list[int]:
    """Limits strictly between ``low`` (starts now, 0: nothing did) and ``high`` (does
    not), longest first: ``parts - 1`` evenly spaced ones, whole minutes."""
    inner = {low + round((high - low) * k / parts) for k in range(1, parts)}
    return sorted((m for m in inner if low < m < high), reverse=True)


def rung_of(minutes: int, job: queries.Job | None, now: datetime) -> Rung:
    """A probe's outcome from squeue's record of it (None: squeue no longer lists it,
    which within MinJobAge means SLURM removed it: its deadline passed unplanned)."""
    if job is None:
        return Rung(minutes, Outcome.UNPLANNED, None, "gone from the queue")
    start = job.start_time.isoformat(timespec="seconds") if job.start_time else None
    if job.state in ("RUNNING", "COMPLETING", "COMPLETED", "CONFIGURING", "FAILED"):
        return Rung(minutes, Outcome.STARTED, start, "")
    if job.pending and pending.waits_for_reservation(job.reason):
        return Rung(minutes, Outcome.RESERVED, None, job.reason)
    if job.pending and job.start_time is not None and job.start_time < now + timedelta(days=365):
        return Rung(minutes, Outcome.PLANNED, start, job.reason)
    return Rung(minutes, Outcome.UNPLANNED, None, job.reason or job.state)


def starts_now(rung: Rung, now: datetime) -> bool:
    """Started, or planned to start within a minute."""
    if rung.outcome is Outcome.STARTED:
        return True
    planned = rung.outcome is Outcome.PLANNED and rung.start is not None
    return planned and datetime.fromisoformat(rung.start) <= now + timedelta(minutes=1)


def longest_now(rungs: Sequence[Rung], now: datetime) -> int | None:
    """The longest limit that starts now: any shorter one does too."""
    return max((r.minutes for r in rungs if starts_now(r, now)), default=None)


def lifetime_minutes(bf_interval: int) -> int:
    """How long a probe may pend before SLURM removes it (its ``--deadline`` slack): two
    rounds of waiting for two backfill passes, and a minute."""
    return math.ceil(2 * _wait_seconds(bf_interval) / 60) + 1


def _wait_seconds(bf_interval: int) -> float:
    """How long one round waits for the plan: two backfill passes and 10 s."""
    return 2 * bf_interval + 10


@dataclass(kw_only=True)
class _Tally:
    """What the probe has cost so far."""

    calls: int = 0
    submitted: int = 0
    at_cap: bool = False
    problem: str | None = None
    ids: list[str] = field(default_factory=list)


def probe(
    options: Callable[[int], list[str]],
    own: int,
    floor: int,
    *,
    bf_interval: int,
    timeout: float = command.DEFAULT_TIMEOUT,
) -> Planned:
    """Ask SLURM's plan for jobs of ``options(minutes)`` from ``own`` down to ``floor``
    minutes (two ladders), then clear every probe. See the module's docstring."""
    began, tally = time.monotonic(), _Tally()
    waited = _wait_for_others(bf_interval, timeout, tally)
    rungs = _round(ladder(own, floor), options, bf_interval, timeout, tally)
    now = datetime.now()
    low = longest_now(rungs, now) or 0
    higher = [r.minutes for r in rungs if r.minutes > low and r.outcome is not Outcome.REFUSED]
    if higher and not tally.at_cap and tally.problem is None:
        finer = [m for m in refine(low, min(higher)) if m >= floor]
        if finer:
            rungs += _round(finer, options, bf_interval, timeout, tally)
    left = _clear(tally, timeout)
    ordered = tuple(sorted(rungs, key=lambda r: -r.minutes))
    started = sum(r.outcome is Outcome.STARTED for r in ordered)
    seconds = round(time.monotonic() - began, 1)
    return Planned(
        rungs=ordered,
        longest_now=longest_now(ordered, datetime.now()),
        floor=floor,
        calls=tally.calls,
        seconds=seconds,
        submitted=tally.submitted,
        started=started,
        problem=tally.problem,
        at_cap=tally.at_cap,
        left=left,
        waited=waited,
    )


def _round(
    limits: list[int],
    options: Callable[[int], list[str]],
    bf_interval: int,
    timeout: float,
    tally: _Tally,
) -> list[Rung]:
    """Submit one ladder (longest first), wait for SLURM's plan of it, cancel what pends."""
    slack = timedelta(minutes=lifetime_minutes(bf_interval))
    ids: dict[int, str] = {}
    refused: list[Rung] = []
    for minutes in limits:
        deadline = datetime.now() + timedelta(minutes=minutes) + slack
        sub = control.submit_probe(options(minutes), deadline, timeout=timeout)
        tally.calls += 1
        if sub.ok and sub.value:
            ids[minutes] = sub.value
            tally.ids.append(sub.value)
            tally.submitted += 1
            continue
        refused.append(Rung(minutes, Outcome.REFUSED, None, sub.problem or "no job id"))
        if sub.kind == "cap":
            tally.at_cap = True
            tally.problem = f"at the submit cap, no probe can be submitted ({sub.problem})"
            break
    if not ids and refused and tally.problem is None:
        tally.problem = f"sbatch refused the probe: {refused[0].reason}"
    return _watch(ids, timeout, bf_interval, tally) + refused


def _watch(ids: dict[int, str], timeout: float, bf_interval: int, tally: _Tally) -> list[Rung]:
    """Poll the probes until each has an answer or two backfill passes have gone by;
    shorter probes are cancelled once a longer one started (they start too)."""
    until = time.monotonic() + _wait_seconds(bf_interval)
    rungs: dict[int, Rung] = {}
    dropped: set[int] = set()
    while ids:
        answer = queries.jobs_by_id(list(ids.values()), timeout=timeout)
        tally.calls += 1
        now = datetime.now()
        by_id = {j.id: j for j in answer.value or []} if answer.ok else {}
        for minutes, job_id in ids.items():
            if minutes not in dropped:
                rungs[minutes] = rung_of(minutes, by_id.get(job_id), now)
        _drop_shorter(ids, rungs, dropped, now, timeout, tally)
        open_ = [r for m, r in rungs.items() if m not in dropped and _undecided(r, now)]
        if not open_ or time.monotonic() >= until:
            break
        time.sleep(2.0)
    done = dropped | {m for m, r in rungs.items() if r.outcome is Outcome.STARTED}
    pending = [ids[m] for m in rungs if m not in done]
    if pending:
        control.cancel(pending, timeout=timeout)
        tally.calls += 1
    return [rungs[m] for m in ids]


def _drop_shorter(
    ids: dict[int, str],
    rungs: dict[int, Rung],
    dropped: set[int],
    now: datetime,
    timeout: float,
    tally: _Tally,
) -> None:
    """Cancel the probes shorter than the longest that starts now: they start too."""
    best = longest_now(list(rungs.values()), now)
    redundant = [m for m in ids if best and m < best and m not in dropped]
    if not redundant:
        return
    control.cancel([ids[m] for m in redundant], timeout=timeout)
    tally.calls += 1
    for m in redundant:
        dropped.add(m)
        rungs[m] = Rung(m, Outcome.STARTED, None, "a longer limit started")


def _undecided(rung: Rung, now: datetime) -> bool:
    """Still waiting for the plan: pending without a start, or planned to start now."""
    return rung.outcome is Outcome.UNPLANNED or (
        rung.outcome is Outcome.PLANNED and starts_now(rung, now)
    )


def _clear(tally: _Tally, timeout: float) -> tuple[str, ...]:
    """Wait (5 s at most) until no probe is queued; cancel again any that still is."""
    live = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
    left: list[str] = []
    for _ in range(10):
        answer = queries.jobs_by_id(tally.ids, timeout=timeout)
        tally.calls += 1
        left = [j.id for j in answer.value or [] if j.state in live] if answer.ok else tally.ids
        if not left:
            break
        control.cancel(left, timeout=timeout)
        tally.calls += 1
        time.sleep(0.5)
    return tuple(left)


def clear_leftovers(queue: Answer[list[queries.Job]], timeout: float) -> int:
    """Cancel plan probes that a killed process left queued (the user's own, by name and
    owner); how many there were. The probes of a live process are left to it."""
    left = [j.id for j in queue.value or [] if _is_probe(j) and not owner_alive(j.comment)]
    if left:
        control.cancel(left, timeout=timeout)
    return len(left)


def _is_probe(job: queries.Job) -> bool:
    return job.name == control.PLAN_PROBE_NAME


def owner_alive(comment: str) -> bool:
    """Whether the process that submitted a probe still runs. Only this host's can be
    told: a probe from another host counts as live (SLURM removes it by its deadline);
    one with no owner (an older shardwise's) counts as left."""
    owner = control.ProbeOwner.from_comment(comment)
    if owner is None:
        return False
    if owner.host != control.ProbeOwner.this().host or owner.pid == os.getpid():
        return True
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a process of another user holds the pid now: cannot tell
    return True


def _wait_for_others(bf_interval: int, timeout: float, tally: _Tally) -> float:
    """Wait until no live probe of another process is queued (a workflow's adaptation and
    a ``cluster status`` asking at once would stand in each other's way), at most as long
    as one whole probe takes; the seconds waited."""
    began = time.monotonic()
    until = began + 2 * _wait_seconds(bf_interval) + 15
    mine = control.ProbeOwner.this()
    while True:
        queue = queries.jobs(timeout=timeout)
        tally.calls += 1
        others = [
            j
            for j in queue.value or []
            if _is_probe(j)
            and control.ProbeOwner.from_comment(j.comment) != mine
            and owner_alive(j.comment)
            and (j.pending or j.running)
        ]
        if not others or time.monotonic() >= until:
            return round(time.monotonic() - began, 1)
        time.sleep(1.0)
