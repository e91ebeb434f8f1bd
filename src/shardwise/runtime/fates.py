"""What became of one of the run's SLURM jobs since the last look, and what to do: pure.

The SLURM plugin (2.8.0) takes a ``PREEMPTED`` job for a running one, and a job that has
left ``squeue`` for a queued one: Snakemake would wait for either forever. The job keeper
(:mod:`shardwise.runtime.keeper`) looks at the run's jobs once per round and acts on what
:func:`judge` says, from what ``squeue`` shows now and what it saw before:

* ``PREEMPTED`` (PreemptMode CANCEL, or a job that may not be requeued), or ``NODE_FAIL``
  where the plugin leaves it to SLURM: **requeue** it (``scontrol requeue``: the same
  job, its shards resume from their last finished file); when SLURM refuses, the job
  **ends** and Snakemake retries it;
* requeued by SLURM itself (PreemptMode REQUEUE, a node failure, ``scontrol requeue``):
  its restart count went up; nothing to do but say so;
* held by SLURM after a requeue (``launch failed requeued held``, ``JobHeldAdmin``): a user
  cannot release that hold: **cancel** it, and Snakemake retries it;
* absent from ``squeue`` for ``lost_after`` rounds in a row: **ends** (the keeper tells
  Snakemake what its shards' markers say);
* any other end (completed, failed, cancelled, timed out): the plugin's to report, unless
  the duty says every end is the keeper's (jobs a restarted workflow adopted).
"""

from dataclasses import dataclass, replace
from enum import StrEnum

from shardwise.run.jobevents import Kind
from shardwise.slurm.queries import LIVE_STATES, Job

#: Pending reasons of a job SLURM held after a requeue; a user cannot release them.
HELD_AFTER_REQUEUE = ("requeued held", "jobheldadmin")
#: Pending reasons of a job its owner or an admin put on hold (``scontrol hold``).
ON_HOLD = {"jobhelduser": "its owner", "jobheldadmin": "an admin"}
#: Terminal states that mean a node failed under the job.
NODE_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL"})


class Act(StrEnum):
    """What the keeper does to a job."""

    NONE = "none"
    REQUEUE = "requeue"  # scontrol requeue
    CANCEL = "cancel"  # scancel: the plugin reports CANCELLED, Snakemake retries
    END = "end"  # the keeper reports the job's end itself


@dataclass(frozen=True)
class Duty:
    """Which jobs' fates are the keeper's: the terminal states it requeues, and whether
    every other end is its to report (no plugin watches adopted jobs)."""

    requeue: frozenset[str] = frozenset({"PREEMPTED"})
    resolve_all: bool = False

    @classmethod
    def own(cls, *, plugin_requeue: bool) -> "Duty":
        """This invocation's jobs: with the plugin's ``requeue`` flag it leaves NODE_FAIL
        to SLURM (and waits forever when SLURM did not requeue), so the keeper does it."""
        states = {"PREEMPTED", "NODE_FAIL"} if plugin_requeue else {"PREEMPTED"}
        return cls(requeue=frozenset(states))

    @classmethod
    def adopted(cls) -> "Duty":
        """Jobs of an earlier invocation: every end is the keeper's, none is requeued (what
        they leave is submitted afresh by the workflow that adopted them)."""
        return cls(requeue=frozenset(), resolve_all=True)


@dataclass(frozen=True)
class Seen:
    """What the keeper last knew of one job."""

    state: str | None = None  # None: never seen
    run: int = 0  # SLURM's restart count last seen
    missing: int = 0  # rounds in a row that squeue did not list it
    said: tuple[int, str] | None = None  # the (run, kind) already said
    acted: tuple[int, Act] | None = None  # the (run, action) already taken


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The event to record (None: nothing new), what to do, and why in words."""

    kind: Kind | None = None
    act: Act = Act.NONE
    why: str = ""
    run: int = 0  # the job's run the event is about (SLURM's restart count during it)
    ask_history: bool = False  # a requeue SLURM did: its cause is in ``sacct -D``
    unseen: bool = False  # it happened before the keeper first saw the job


def judge(
    before: Seen, now: Job | None, duty: Duty, *, lost_after: int = 2
) -> tuple[Seen, Verdict]:
    """The job's new :class:`Seen` and the :class:`Verdict` on it."""
    if now is None:
        return _missing(before, duty, lost_after)
    seen = replace(before, state=now.state, missing=0, run=max(before.run, now.restarts))
    if now.state not in LIVE_STATES:
        return _ended(seen, now, duty)
    if now.pending and (held := _hold(seen, now)) is not None:
        return held
    if now.restarts > before.run:
        if before.acted == (now.restarts - 1, Act.REQUEUE):
            return seen, Verdict()  # our own requeue, said when it was made
        unseen = _first_sighting(before, duty)
        why = f"was requeued by SLURM{unseen} (run {now.restarts + 1}); its shards resume from "
        why += "their last finished file in the same job"
        said, verdict = _say(seen, now.restarts - 1, Kind.REQUEUED, Act.NONE, why, history=True)
        return said, replace(verdict, unseen=bool(unseen))
    return seen, Verdict()


def _hold(seen: Seen, now: Job) -> tuple[Seen, Verdict] | None:
    """A pending job on hold: SLURM's after a requeue (cancelled: a user cannot release
    it), or its owner's or an admin's (waited for, said once)."""
    if _held(now) and now.restarts > 0:
        why = f"was held by SLURM after a requeue ({now.reason}), which only an operator can "
        why += "release: cancelled, so that Snakemake submits it again"
        return _say(seen, now.restarts, Kind.HELD, Act.CANCEL, why)
    by = ON_HOLD.get(now.reason.strip().lower())
    if by is None:
        return None
    why = f"is on hold ({now.reason}: put there by {by}, `scontrol hold`): the run waits for "
    why += f"it; `scontrol release {now.id}` lets it start"
    return _say(seen, now.restarts, Kind.ON_HOLD, Act.NONE, why)


def _first_sighting(before: Seen, duty: Duty) -> str:
    """How a requeue that happened before the keeper's first look is worded: a job of
    this invocation was kept all along (the keeper's first look came late); an adopted one
    was kept by no workflow while its own had died."""
    if before.state is not None:
        return ""
    if duty.resolve_all:
        return " while no workflow kept it"
    return " before the keeper's first look at it"


def _missing(before: Seen, duty: Duty, lost_after: int) -> tuple[Seen, Verdict]:
    """Not in squeue: lost once that holds ``lost_after`` rounds in a row."""
    seen = replace(before, missing=before.missing + 1)
    if seen.missing < lost_after:
        return seen, Verdict()
    last = f"last seen {before.state}" if before.state else "never seen"
    why = f"has left squeue before its end was seen ({last}; MinJobAge passed, or the "
    why += "controller lost it)"
    return _say(seen, before.run, Kind.LOST, Act.END, why)


def _ended(seen: Seen, now: Job, duty: Duty) -> tuple[Seen, Verdict]:
    """A job SLURM ended and did not requeue."""
    kind = Kind.PREEMPTED if now.state == "PREEMPTED" else None
    kind = Kind.NODE_FAIL if now.state in NODE_STATES else kind
    where = f" in partition {now.partition}" if now.partition else ""
    what = {Kind.PREEMPTED: "was preempted", Kind.NODE_FAIL: "lost its node"}.get(kind, "ended")
    if now.state in duty.requeue:
        if now.requeue is False:
            why = f"{what}{where} ({now.state}) and may not be requeued (submitted with "
            why += "--no-requeue): Snakemake submits it again"
            return _say(seen, now.restarts, kind, Act.END, why)
        if seen.acted == (now.restarts, Act.END):  # SLURM refused the requeue
            return _say(seen, now.restarts, kind, Act.END, f"{what}{where} ({now.state})")
        why = f"{what}{where} ({now.state}): requeued, its shards resume from their last "
        why += "finished file in the same job"
        return _say(seen, now.restarts, kind, Act.REQUEUE, why)
    if duty.resolve_all:
        return _say(seen, now.restarts, kind or Kind.ENDED, Act.END, f"{what}{where} ({now.state})")
    if kind is not None:  # the plugin reports it; said once, for the counts
        return _say(seen, now.restarts, kind, Act.NONE, f"{what}{where} ({now.state})")
    return seen, Verdict()


def _say(
    seen: Seen, run: int, kind: Kind | None, act: Act, why: str, *, history: bool = False
) -> tuple[Seen, Verdict]:
    """The verdict: an event once per (run, kind); a requeue or a cancel once per run (SLURM
    takes a moment to act on it); an end every round until the job is no longer watched."""
    said = (run, str(kind)) if kind is not None else None
    new_kind = kind if said is not None and said != seen.said else None
    acted = seen.acted
    if act in (Act.REQUEUE, Act.CANCEL):
        if seen.acted == (run, act):
            act = Act.NONE
        else:
            acted = (run, act)
    after = replace(seen, said=said or seen.said, acted=acted)
    return after, Verdict(kind=new_kind, act=act, why=why, run=run, ask_history=history)


def _held(job: Job) -> bool:
    reason = job.reason.lower()
    return any(h in reason for h in HELD_AFTER_REQUEUE)
