"""The job keeper: no job of the run waits forever for an end that never comes.

One round (:meth:`Keeper.check`) asks ``squeue`` about the jobs it keeps (one call for
all of them), judges each (:func:`shardwise.runtime.fates.judge`) and acts: requeue a
preempted job, cancel a job SLURM held after a requeue, end a job that left the queue
unseen. Every event is one console line and one line of ``job-events.jsonl``.

Two keepers use it. The workflow's own (a thread of the top-level Snakemake process,
started by the Snakefile's ``onstart``) keeps the jobs the executor waits for, and ends
one by telling Snakemake what its shards' markers say. The adoption
(:mod:`shardwise.runtime.adopt`) keeps the jobs of an earlier invocation until each ends.
"""

import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import IO, Protocol

from shardwise.run import failures, jobevents, markers, ranges
from shardwise.run.jobevents import JobEvent, Kind
from shardwise.runtime.fates import Act, Duty, Seen, Verdict, judge
from shardwise.slurm import command, control, queries

#: The console prefix of every line the keeper prints.
PREFIX = "shardwise: "


class Jobs(Protocol):
    """The jobs a keeper keeps, and how it reports one's end."""

    def watched(self) -> dict[str, tuple[int, ...]]:
        """SLURM job id -> the shards it carries."""
        ...

    def end(self, job_id: str, *, done: bool, why: str) -> bool:
        """Report the job's end (``done``: all its shards are marked); False when it was no
        longer watched (its end was reported meanwhile)."""
        ...


@dataclass(kw_only=True)
class Keeper:
    """Keeps some of the run's jobs: :meth:`check` is one round; :meth:`start` a thread."""

    run_dir: Path
    jobs: Jobs
    duty: Duty
    every: float = 60.0
    lost_after: int = 2
    out: IO[str] = field(default_factory=lambda: sys.stderr)
    what: str = "job"  # "job" or "adopted job", for the console
    timeout: float = command.DEFAULT_TIMEOUT
    seen: dict[str, Seen] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def check(self) -> int:
        """One round; how many jobs are still kept after it."""
        watched = self.jobs.watched()
        if not watched:
            return 0
        answer = queries.jobs_by_id(sorted(watched), timeout=self.timeout)
        if not answer.ok:
            return len(watched)  # squeue did not answer: nothing is judged lost on silence
        now = {j.id: j for j in answer.value or []}
        for job_id, shards in sorted(watched.items()):
            before = self.seen.get(job_id, Seen())
            seen, verdict = judge(before, now.get(job_id), self.duty, lost_after=self.lost_after)
            self.seen[job_id] = seen
            self._act(job_id, shards, now.get(job_id), verdict)
        kept = self.jobs.watched()
        self.seen = {k: v for k, v in self.seen.items() if k in kept}
        return len(kept)

    def _act(
        self, job_id: str, shards: Sequence[int], job: queries.Job | None, verdict: Verdict
    ) -> None:
        """Do what the verdict says; one line and one event when there is news."""
        kind, why, action = verdict.kind, verdict.why, ""
        if verdict.unseen and self._told(job_id, verdict.run):
            return  # a requeue recorded before this keeper came (by the job, or a keeper)
        if verdict.ask_history and kind is Kind.REQUEUED and job is not None:
            kind, why = self._cause(job, shards, verdict.run, why)
        if verdict.act is Act.REQUEUE:
            done = control.requeue(job_id, timeout=self.timeout)
            action = "requeued"
            if not done.ok and not self._back_in_queue(job_id):  # the job may have done it
                run = self.seen[job_id].run
                self.seen[job_id] = replace(self.seen[job_id], acted=(run, Act.END))
                why = why.split(":")[0] + f": SLURM refused to requeue it ({done.problem})"
                verdict = replace(verdict, act=Act.END)
        elif verdict.act is Act.CANCEL:
            control.cancel([job_id], timeout=self.timeout)
            action = "cancelled"
        if verdict.act is Act.END:
            left = [s for s in shards if not markers.shard_marker_path(self.run_dir, s).exists()]
            if not self.jobs.end(job_id, done=not left, why=why):
                return  # reported meanwhile (by the plugin, or a round before)
            action, outcome = self._outcome(shards, left)
            told = self._own_record(job_id, left) if self.duty.resolve_all else None
            if told is not None:  # an adopted job: no plugin reports its shard's own reason
                kind = Kind.PREEMPTED if told.kind == "preempted" else kind
                why = f"{why}: {told.reason}"
            why = f"{why}: {outcome}"
        if kind is not None or verdict.act is Act.END:
            self._record(job_id, shards, job, (kind or Kind.ENDED, verdict.run), action, why)

    def _own_record(self, job_id: str, shards: Sequence[int]) -> failures.FailureRecord | None:
        """The newest failure record a shard of this job wrote in it (its stop at the
        walltime, a preemption, a file that failed): why it ended, in its own words."""
        mine = [r for s in shards if (r := failures.latest(self.run_dir, s)) is not None]
        mine = [r for r in mine if r.slurm_job_id == job_id]
        return max(mine, key=lambda r: r.at, default=None)

    def _told(self, job_id: str, run: int) -> list[JobEvent]:
        """The events already recorded about this run of the job."""
        return [e for e in jobevents.load(self.run_dir) if e.job_id == job_id and e.run == run]

    def _back_in_queue(self, job_id: str) -> bool:
        """Whether the job is live again (a preempted shard job requeues itself, and SLURM
        refuses a second requeue): then nothing ends and nothing is submitted again."""
        states = queries.job_states([job_id], timeout=self.timeout)
        return states.ok and (states.value or {}).get(job_id) in queries.LIVE_STATES

    def _outcome(self, shards: Sequence[int], left: list[int]) -> tuple[str, str]:
        """The action and the words for a job whose end the keeper reported."""
        n = len(shards)
        if not left:
            return "done", f"{n} of {n} shard(s) done"
        if self.duty.resolve_all:
            return (
                "left",
                f"{len(left)} of {n} shard(s) left (shards {_r(left)}): this run labels them",
            )
        text = f"{len(left)} of {n} shard(s) left (shards {_r(left)}): Snakemake submits them "
        return "retried", text + "again, each resuming from its last finished file"

    def _cause(
        self, job: queries.Job, shards: Sequence[int], run: int, why: str
    ) -> tuple[Kind, str]:
        """Why a job went back to the queue: what the job itself recorded (a preempted
        shard job requeues itself, or its stop names the preemption), else ``sacct -D``
        when accounting answers."""
        told = self._told(job.id, run)
        tail = why.partition("; ")[2]
        where = f" in partition {job.partition}" if job.partition else ""
        if any(e.kind == Kind.PREEMPTED for e in told):
            return Kind.PREEMPTED, f"was preempted{where} and requeued itself; {tail}"
        if self._stopped_preempted(job.id, shards):
            return Kind.PREEMPTED, f"was preempted{where} and requeued by SLURM; {tail}"
        history = queries.run_history(job.id, timeout=self.timeout)
        runs = history.value or [] if history.ok else []
        before = runs[run] if 0 <= run < len(runs) else ""
        if before == "PREEMPTED":
            return Kind.PREEMPTED, f"was preempted{where} and requeued by SLURM; {tail}"
        if before in ("NODE_FAIL", "BOOT_FAIL"):
            return Kind.NODE_FAIL, f"lost its node ({before}) and was requeued by SLURM; {tail}"
        return Kind.REQUEUED, why

    def _stopped_preempted(self, job_id: str, shards: Sequence[int]) -> bool:
        """Whether the job's own stop record (its shard's newest failure record) says SLURM
        preempted it in the run that just ended: true without accounting too. A record
        older than the job's last event is of an earlier run (the event of its requeue
        came after it), not of this one (a node failure writes no record)."""
        told = [_local(e.at) for e in jobevents.load(self.run_dir) if e.job_id == job_id]
        last = max(told, default=None)
        for shard in shards:
            newest = failures.latest(self.run_dir, shard)
            if newest is None or newest.kind != "preempted" or newest.slurm_job_id != job_id:
                continue
            if last is None or _local(newest.at) > last:
                return True
        return False

    def _record(
        self,
        job_id: str,
        shards: Sequence[int],
        job: queries.Job | None,
        what: tuple[Kind, int],
        action: str,
        why: str,
    ) -> None:
        """One console line and one event (``what``: its kind and the job's run)."""
        kind, run = what
        text = f"{self.what} {job_id} (shards {_r(shards)}) {why}"
        self.out.write(f"{PREFIX}{text}\n")
        self.out.flush()
        event = JobEvent(
            at=datetime.now().isoformat(timespec="seconds"),
            job_id=job_id,
            kind=str(kind),
            shards=tuple(shards),
            state=job.state if job is not None else "",
            partition=job.partition if job is not None else "",
            run=run,
            action=action,
            text=text,
        )
        jobevents.append(self.run_dir, event)

    def start(self) -> threading.Thread:
        """Check every ``every`` seconds in a daemon thread until :meth:`close`."""

        def loop() -> None:
            while not self.stop.wait(self.every):
                try:
                    self.check()
                except Exception as e:  # noqa: BLE001 - the workflow must outlive a bad round
                    self.out.write(f"{PREFIX}the job keeper's check failed ({e!r}); next in ")
                    self.out.write(f"{self.every:g} s\n")

        thread = threading.Thread(target=loop, name="shardwise-keeper", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """Stop after the round in progress."""
        self.stop.set()


def _local(stamp: str) -> datetime:
    """An ISO time (a failure record's carries its offset, an event's is local) as local."""
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return datetime.min
    return when.astimezone().replace(tzinfo=None) if when.tzinfo is not None else when


def _r(shards: Sequence[int]) -> str:
    return ranges.compress(sorted(shards))
