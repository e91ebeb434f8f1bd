"""The running workflow fits its walltimes to a hidden maintenance window by itself.

``walltime.adapt`` (on with the SLURM executor): a thread of the top-level Snakemake
process checks the run's jobs every ``adapt_check_seconds`` (one ``squeue`` of the user's
own jobs). While one of them pends for a reservation it asks SLURM's own plan
(:mod:`shardwise.ops.walltime.plan_probe`, at most once per ``adapt_probe_seconds``) for the
longest limit of the run's request that starts now, and then, with no operator:

* lowers the run's pending jobs that ask for more (``scontrol update``, decrease only,
  never below what one file of each job's shards needs, measured on the run's finished
  files: ``planner/walltime.py`` ``one_file_minutes``, whose basis the line names; when
  not even that starts now, or no file has finished yet, it changes nothing and says so);
* replaces a pending job whose limit is below what a file now needs (it would start and be
  cut before its file): cancelled before it starts, Snakemake submits it again with at
  least that limit;
* records the fit (:mod:`shardwise.run.adaptation`): the classify rule's runtime caps
  the next submissions so that they end by the same horizon (a group of K shards asks
  for the horizon's minutes in all), and the thread lowers any queued job above it;
* goes back to the configured limits once the horizon has passed and no job of the run
  pends for a reservation any more (what SLURM says, not a guess of the window's end).

Every change is a console line and an event in the record, which ``cluster status`` and
``coverage`` show. Only the user's own jobs of this run are read or changed; a limit is
never raised. A ``kill -9`` leaves at most some plan probes, which SLURM removes by their
deadline and the next workflow start or ``cluster status`` cancels.
"""

import functools
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO

from shardwise.errors import RecordError
from shardwise.ops.cluster import retime
from shardwise.ops.cluster.asking import run_jobs
from shardwise.ops.walltime import plan_probe
from shardwise.ops.walltime import probe as walltime_probe
from shardwise.planner.walltime import Floor
from shardwise.run import adaptation, claims, ranges
from shardwise.run.adaptation import Adaptation, Event, Fit
from shardwise.slurm import command, control, queries
from shardwise.slurm.pending import waits_for_reservation

#: The console prefix of every line the adaptation prints.
PREFIX = "shardwise adapt: "
#: The shortest limit a plan probe tries before any file of the run has finished (the
#: signal's lead and the job's start, and a minute of work).
FIRST_FILE_FLOOR = 5

RunJobs = dict[str, tuple[queries.Job, tuple[int, ...]]]


@dataclass(frozen=True)
class AdaptSettings:
    """How often to look and to probe, and what one file of some shards needs."""

    check_seconds: float
    probe_seconds: float
    floor: Callable[[tuple[int, ...]], Floor]  # what one file of these shards needs
    timeout: float = command.DEFAULT_TIMEOUT


@dataclass(kw_only=True)
class Adapter:
    """One run's adaptation: :meth:`check` is one round; :meth:`start` runs it in a thread."""

    run_dir: Path
    settings: AdaptSettings
    out: IO[str] = field(default_factory=lambda: sys.stderr)
    user: str = field(default_factory=queries.current_user)
    record: Adaptation = field(default_factory=Adaptation)
    last_probe: float | None = None
    waiting: bool = False  # the last probe found nothing that starts now
    started: bool = False
    last_floor: Floor | None = None  # what one file needed at the last look (said on change)
    stop: threading.Event = field(default_factory=threading.Event)
    rounds: int = 0

    def begin(self) -> None:
        """A new invocation: clear leftovers of a killed one (probes, an old fit)."""
        try:
            previous = adaptation.load(self.run_dir)
        except RecordError:
            previous = None
        self.record = replace(previous or Adaptation(), since=_now())
        adaptation.save(self.run_dir, self.record)  # cluster status leaves the probing to us
        queue = queries.jobs(self.user, timeout=self.settings.timeout)
        left = plan_probe.clear_leftovers(queue, self.settings.timeout)
        if left:
            self._say("cleared", f"cancelled {left} plan probe(s) a killed process left queued")
        if self.record.fit is not None:
            self._say("cleared", "a new invocation starts from the configured limits", fit=None)
        self.started = True

    def check(self) -> None:
        """One round: look at the run's jobs; probe, lower, restore as they need."""
        if not self.started:
            self.begin()
        self.rounds += 1
        seen = self._run_jobs()
        if seen is None:
            return  # the next round asks again; the plugin reports a SLURM outage
        mine, pending, reserved = seen
        self._replace_short(pending)
        fit = self.record.fit
        cap = fit.cap(datetime.now()) if fit is not None else None
        if fit is not None and cap is not None:  # still pending: end by the same horizon
            self._lower(
                pending, cap, f"to end by {_hhmm(fit.horizon)}, SLURM's plan at {_hhmm(fit.since)}"
            )
        since = None if self.last_probe is None else time.monotonic() - self.last_probe
        due = since is None or since >= self.settings.probe_seconds
        if reserved and due:
            oldest = min(reserved, key=lambda j: (j.submit_time or datetime.max, j.id))
            self._probe(oldest, pending)
        elif fit is not None and cap is None:
            self._expired(fit)
        elif not reserved and self.waiting and mine:
            self.waiting = False
            text = "no job of the run pends for a reservation any more (SLURM): the window has "
            text += "passed; the next submissions ask for the configured limits"
            self._say("restored", text, fit=None)

    def _run_jobs(self) -> tuple[RunJobs, RunJobs, list[queries.Job]] | None:
        """The run's jobs in the queue, those pending, and those pending for a reservation
        (None: squeue did not answer)."""
        queue = queries.jobs(self.user, timeout=self.settings.timeout)
        if not queue.ok:
            return None
        mine = run_jobs(self.run_dir, queue.value or [], claims.Submitter.recorded(self.run_dir))
        pending = {i: js for i, js in mine.items() if js[0].pending}
        reserved = [j for j, _ in pending.values() if waits_for_reservation(j.reason)]
        return mine, pending, reserved

    def _expired(self, fit: Fit) -> None:
        """The fit's horizon is too close for one file: back to the configured limits."""
        text = f"less than one file's {fit.floor} min is left before the fit's horizon "
        text += f"({_hhmm(fit.horizon)}): the next submissions ask for the configured limits "
        text += "(SLURM's plan is asked again if they pend for a reservation)"
        self._say("expired", text, fit=None)

    def _probe(self, job: queries.Job, pending: RunJobs) -> None:
        """Ask SLURM's plan for ``job``'s request; fit and lower, or wait."""
        self.last_probe = time.monotonic()
        timeout = self.settings.timeout
        detail = queries.job_detail(job.id, timeout=timeout)
        cfg = queries.config(timeout=timeout)
        if not detail.ok or not detail.value:
            self._say("waiting", f"cannot read job {job.id}'s request ({detail.problem})")
            return
        shards = tuple(s for _, ss in pending.values() for s in ss)
        need = self.settings.floor(shards)
        floor = need.minutes if need.minutes is not None else FIRST_FILE_FLOOR
        own = job.time_limit_minutes or floor
        bf = queries.backfill_interval_seconds(cfg.value or {}) if cfg.ok else 30
        options = functools.partial(walltime_probe.test_only_options, detail.value)
        if own <= floor:
            text = f"job {job.id} pends for a reservation ({job.reason}) with {own} min, no more "
            text += f"than one file needs ({floor} min): it waits for the window to pass"
            self.waiting = True
            self._say("waiting", text)
            return
        planned = plan_probe.probe(options, own, floor, bf_interval=bf, timeout=timeout)
        cost = f"{planned.calls} SLURM call(s) in {planned.seconds:g} s; "
        cost += f"submitted: {planned.changed()}"
        if planned.longest_now is None:
            again = self.waiting and self.record.fit is None
            self.waiting = True
            text = f"job {job.id} pends for a reservation ({job.reason}); SLURM's plan: "
            text += f"{planned.why_none()}; the jobs keep their limits and wait, asking again "
            text += f"every {self.settings.probe_seconds:g} s ({cost})"
            # a wait said already is recorded (its cost), not printed again: nothing changed
            self._say("probed" if again else "waiting", text, fit=None, probe=planned, quiet=again)
            return
        if need.minutes is None:
            self._measure_first(job, pending, planned, need, cost)
            return
        self.waiting = False
        minutes, now = planned.longest_now, datetime.now()
        horizon = planned.held_at(now) + timedelta(minutes=minutes)
        why = f"job {job.id} pends for a reservation ({job.reason}); SLURM's plan for its request "
        why += f"starts a job of {minutes} min now, none longer"
        fit = Fit(
            horizon=horizon.isoformat(timespec="seconds"),
            minutes=minutes,
            floor=floor,
            since=_now(),
            reason=why,
        )
        text = f"{why} ({cost}): the run's pending jobs and next submissions ask for at most "
        text += f"{minutes} min (ending by {horizon:%H:%M}; never below {floor} min, one file: "
        text += f"{need.basis})"
        self._say("fitted", text, minutes=minutes, fit=fit, probe=planned)
        self._lower(pending, fit.cap(now) or floor, "SLURM's plan")

    def _measure_first(
        self,
        job: queries.Job,
        pending: RunJobs,
        planned: plan_probe.Planned,
        need: Floor,
        cost: str,
    ) -> None:
        """No file of the run has finished: what a file needs is unknown, so no fit is set
        on a guess. One job (``job``) is lowered to the longest limit SLURM's plan starts
        now, to measure the first file; the others keep their limits until its figure
        (the next probe fits them all)."""
        minutes = planned.longest_now or 0
        why = f"{need.basis}: job {job.id} alone is lowered to the longest limit SLURM's "
        why += f"plan starts now, {minutes} min, to measure the first file; the other jobs "
        why += f"keep their limits until its figure ({cost})"
        self.waiting = False
        self._say("measuring", why, minutes=minutes, probe=planned, quiet=True)  # its cost
        self._lower({job.id: pending[job.id]}, minutes, why)

    def _lower(self, pending: RunJobs, cap: int, why: str) -> None:
        """Lower every pending job of the run above ``cap`` to it, never below what one
        file of its own shards needs (decrease only): one line for the jobs SLURM took,
        one per job it refused."""
        planned = []
        for job_id, (job, shards) in pending.items():
            need = self.settings.floor(shards).minutes or cap
            planned += retime.changes({job_id: (job, shards)}, max(cap, need))
        if not planned:
            return
        outcomes = retime.apply(planned, control.lower_time_limit, dry_run=False)
        done = [o.change for o in outcomes if o.status is retime.Status.LOWERED]
        if done:
            jobs = ", ".join(
                f"{c.job_id} ({c.minutes} -> {c.new_minutes} min, shards {_shards(c)})"
                for c in done
            )
            text = f"lowered job(s) {jobs}: {why}"
            self._say("lowered", text, minutes=cap, jobs=tuple(c.job_id for c in done))
        for o in outcomes:
            if o.status is not retime.Status.LOWERED:
                text = f"could not lower job {o.change.job_id}: {o.problem}"
                self._say("refused", text, jobs=(o.change.job_id,))

    def _replace_short(self, pending: RunJobs) -> None:
        """Cancel the pending jobs whose limit is below what one file of their shards now
        needs (the floor rose after they were submitted or lowered: a limit cannot be
        raised): they would start and be cut before their file; nothing of theirs ran,
        and Snakemake submits them again with at least that limit. The floor's changes are
        said, with their basis."""
        shards = tuple(s for _, ss in pending.values() for s in ss)
        need = self.settings.floor(shards) if shards else None
        if need is not None and need != self.last_floor and need.minutes is not None:
            known = self.last_floor is not None and self.last_floor.minutes is not None
            was = f" (was {self.last_floor.minutes} min)" if known else ""
            text = f"one file of the pending shards now needs {need.minutes} min{was}: {need.basis}"
            self._say("floor", text, minutes=need.minutes)
        self.last_floor = need or self.last_floor
        short = []
        for job_id, (job, job_shards) in pending.items():
            floor = self.settings.floor(job_shards).minutes
            limit = job.time_limit_minutes
            if floor is not None and limit and limit < floor:
                short.append((job_id, limit, floor, job_shards))
        if not short:
            return
        done = control.cancel([j for j, *_ in short], timeout=self.settings.timeout)
        said = ", ".join(f"{j} ({limit} < {floor} min, shards {ranges.compress(list(ss))})"
                         for j, limit, floor, ss in short)  # fmt: skip
        if not done.ok:
            self._say("refused", f"could not replace job(s) {said}: {done.problem}")
            return
        text = f"replaced job(s) {said}: a limit below what one file needs would start and be "
        text += "cut before its file; cancelled before they started, Snakemake submits them "
        text += "again with at least that limit"
        self._say("replaced", text, jobs=tuple(j for j, *_ in short))

    _KEEP = object()

    def _say(
        self,
        action: str,
        text: str,
        *,
        minutes: int | None = None,
        jobs: tuple[str, ...] = (),
        fit: Fit | object | None = _KEEP,
        probe: plan_probe.Planned | None = None,
        quiet: bool = False,
    ) -> None:
        """Print one line (unless ``quiet``) and record it (with the fit now in force)."""
        if not quiet:
            self.out.write(f"{PREFIX}{text}\n")
            self.out.flush()
        now_fit = self.record.fit if fit is Adapter._KEEP else fit
        cost = {}
        if probe is not None:
            cost = {
                "probe_calls": probe.calls,
                "probe_seconds": probe.seconds,
                "probe_jobs": probe.submitted,
            }
        event = Event(at=_now(), action=action, text=text, minutes=minutes, jobs=jobs, **cost)
        self.record = self.record.with_event(event, now_fit)  # type: ignore[arg-type]
        adaptation.save(self.run_dir, self.record)

    def start(self) -> threading.Thread:
        """Check every ``check_seconds`` in a daemon thread until :meth:`close`."""

        def loop() -> None:
            while not self.stop.is_set():
                try:
                    self.check()
                except Exception as e:  # noqa: BLE001 - the workflow must outlive a bad round
                    self.out.write(
                        f"{PREFIX}this check failed ({type(e).__name__}: {e}); next "
                        f"in {self.settings.check_seconds:g} s\n"
                    )
                self.stop.wait(self.settings.check_seconds)

        thread = threading.Thread(target=loop, name="shardwise-adapt", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """Stop after the round in progress."""
        self.stop.set()


def _shards(change: retime.Change) -> str:
    """A job's shards as a range expression."""
    return ranges.compress(list(change.shards))


def _now() -> str:
    return datetime.now().isoformat(timespec="seconds")


def _hhmm(iso: str) -> str:
    """``2026-12-03T18:20:00`` -> ``18:20``."""
    return f"{datetime.fromisoformat(iso):%H:%M}"
