"""One launcher job of the chain: queue the successor, run the workflow, end it well.

In order:

1. a chain stopped by ``launch --stop`` starts nothing (exit 0);
2. the chain's queue is topped up to ``request.SPARES`` launchers waiting behind this one
   (the same request, ``singleton``: one launcher per run at once), extra ones cancelled.
   They were queued before this job started (by ``shardwise launch`` or its predecessor),
   so whatever way this job ends, even in its first second (walltime, node failure, an
   admin's ``scancel``), one of them starts and adopts the live shard jobs while another
   still waits;
3. Snakemake runs as a child in its own process group, set to die with this process
   (``PR_SET_PDEATHSIG``: a SIGKILL of the launcher, the OOM killer or a crash takes it
   along even where SLURM tracks processes by tree, so no orphan drives the run from no
   job). The walltime signal (``--signal=B:USR1@<stop_before>``) or a cancel (SIGTERM)
   kills that group with SIGKILL: the plugin cancels the shard jobs only on SIGINT, so
   they keep running for the successor, which clears the lock this job's Snakemake left
   (``planner/snakemakelock.py``: its SLURM job has ended). An orphan an older launcher
   left (``planner/runlock.py``) is ended by the planner on its own host, and waited for
   from another host: it never ends the chain;
4. Snakemake's own end decides: 0 (every target done) cancels the queued launchers and
   ends the chain; a failure after more shards were labelled leaves them to go on (their
   retries start afresh); a failure with no progress ends the chain (the same failure
   would repeat every generation), with a line that says why.
"""

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from shardwise.errors import ConfigError
from shardwise.ops.launch import request
from shardwise.ops.launch.chain import chain_jobs, now, submit_launchers
from shardwise.planner import runlock
from shardwise.run import claims, markers
from shardwise.run import launch as record
from shardwise.run.launch import ChainEvent, Launch, Step
from shardwise.slurm import control

#: The console prefix of every line a launcher prints (its log: logs/launch/<job>.log).
PREFIX = "shardwise launch: "
#: Linux's prctl option: the signal a child gets when its parent dies.
PR_SET_PDEATHSIG = 1
#: Seconds between looks at an orphan on another host that holds the run.
ORPHAN_POLL_SECONDS = 30.0
#: The signals that stop a launcher's Snakemake without cancelling its shard jobs.
STOP_SIGNALS = {signal.SIGUSR1: "its walltime is near", signal.SIGTERM: "it was cancelled"}


@dataclass(frozen=True)
class Outcome:
    """How Snakemake's end decides the chain's next step."""

    step: Step
    keep_successor: bool
    exit_code: int


def decide(returncode: int, stopped_by: str | None, progress: int) -> Outcome:
    """What this generation does after Snakemake ended (pure)."""
    if stopped_by is not None:
        return Outcome(Step.STOPPING, keep_successor=True, exit_code=0)
    if returncode == 0:
        return Outcome(Step.COMPLETE, keep_successor=False, exit_code=0)
    if progress > 0:
        return Outcome(Step.PROGRESS, keep_successor=True, exit_code=returncode)
    return Outcome(Step.ENDED, keep_successor=False, exit_code=returncode)


@dataclass(kw_only=True)
class Generation:
    """One launcher job (``job_id``) of the chain of ``run_dir``."""

    run_dir: Path
    job_id: str
    out: IO[str] = field(default_factory=lambda: sys.stdout)
    host: str = field(default_factory=claims.hostname)
    name: str = ""  # the chain's job name (launch.json), read once at the start
    successor: str | None = None
    stopped_by: str | None = None
    child: subprocess.Popen[bytes] | None = None
    _pause: threading.Event = field(default_factory=threading.Event)  # set by a stop signal

    def say(self, step: Step, text: str, detail: str = "") -> None:
        """One line in the log and one event in ``chain.jsonl``."""
        self.out.write(f"{PREFIX}{text}\n")
        self.out.flush()
        event = ChainEvent(at=now(), job_id=self.job_id, step=step, host=self.host,
                           detail=detail, text=text)  # fmt: skip
        record.append(self.run_dir, event)

    def run(self) -> int:
        """The whole generation; its exit status."""
        launch = self._launch()
        self.name = launch.name
        if launch.stopped_at is not None:
            return self._stopped_before_start()
        self.say(Step.STARTED, f"launcher job {self.job_id} started on {self.host}")
        self._queue_successor(launch)
        if self._launch().stopped_at is not None:  # `--stop` came while it queued
            return self._stopped_before_start()
        before = len(markers.done_shards(self.run_dir))
        previous = {s: signal.signal(s, self._on_stop) for s in STOP_SIGNALS}
        try:
            self._wait_for_orphan()
            returncode = self._run_snakemake(launch) if self.stopped_by is None else -1
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        progress = len(markers.done_shards(self.run_dir)) - before
        return self._end(decide(returncode, self.stopped_by, progress), returncode, progress)

    def _wait_for_orphan(self) -> None:
        """Wait while the run is held by an orphan on another host (a main process whose
        launcher job ended: it drives the run and ends by itself; one on this host the
        planner ends), or until this job's stop signal."""
        found = runlock.orphan(self.run_dir)
        if found is None or found.here:
            return
        text = f"the run is held by {found.describe()}, on another host: waiting for it to end "
        self.say(Step.WAITING, text + "(it cannot be ended from here), then taking over")
        while found is not None and not found.here and self.stopped_by is None:
            self._pause.wait(ORPHAN_POLL_SECONDS)
            found = runlock.orphan(self.run_dir)

    def _launch(self) -> Launch:
        launch = record.load(self.run_dir)
        if launch is None:
            path = record.launch_path(self.run_dir)
            raise ConfigError(f"{path}: missing; this job is run by `shardwise launch`")
        return launch

    def _stopped_before_start(self) -> int:
        self._cancel_queued()
        self.say(Step.STOPPED, "the chain was stopped (`launch --stop`): nothing started")
        return 0

    def _cancel_queued(self) -> list[str]:
        """Cancel the chain's queued launchers (never this job)."""
        ids = [j.id for j in chain_jobs(self.name) if j.pending and j.id != self.job_id]
        if ids:
            control.cancel(ids)
        return ids

    def _queue_successor(self, launch: Launch) -> None:
        """Top the queue behind this job up to ``request.SPARES`` launchers (cancelling
        extra ones, newest first: a doubly submitted chain would fork)."""
        queued = sorted(
            (j.id for j in chain_jobs(self.name) if j.pending and j.id != self.job_id), key=int
        )
        extra = queued[request.SPARES :]
        if extra:
            control.cancel(extra)
            text = f"cancelled queued launcher(s) {', '.join(extra)}: {request.SPARES} wait at most"
            self.out.write(f"{PREFIX}{text}\n")
        kept = queued[: request.SPARES]
        new, problem = submit_launchers(launch, self.run_dir, request.SPARES - len(kept))
        waiting = kept + new
        if waiting:
            self.successor = waiting[0]
            text = f"launcher job(s) {', '.join(waiting)} queued behind this one"
            text += f" (queued now: {', '.join(new)})" if new else ""
            text += ": the next starts when this job ends, however it ends"
            text += f"; sbatch refused another ({problem})" if problem else ""
            self.say(Step.SUCCESSOR, text, detail=",".join(waiting))
            return
        text = f"sbatch refused the successor ({problem}): the chain ends with this "
        text += "launcher; run `shardwise launch` again once sbatch works"
        self.say(Step.NO_SUCCESSOR, text)

    def _run_snakemake(self, launch: Launch) -> int:
        """Run the workflow until it ends or a stop signal comes; its exit status."""
        argv = request.snakemake_command(launch)
        self.child = subprocess.Popen(
            argv,
            cwd=launch.workdir,
            start_new_session=True,
            preexec_fn=_die_with(os.getpid()),  # noqa: PLW1509 - one prctl, then exec
        )
        if self.stopped_by is not None:  # the signal came while it started
            self._kill_child()
        return self.child.wait()

    def _on_stop(self, signum: int, _frame: FrameType | None) -> None:
        self.stopped_by = STOP_SIGNALS.get(signal.Signals(signum), signal.strsignal(signum))
        self._pause.set()
        self._kill_child()

    def _kill_child(self) -> None:
        """SIGKILL Snakemake's process group: its shard jobs live on (no SIGINT)."""
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.pid, signal.SIGKILL)

    def _end(self, outcome: Outcome, returncode: int, progress: int) -> int:
        shards = f"{progress:,} more shard(s) done in this generation"
        if outcome.step is Step.STOPPING:
            text = f"stopped snakemake because {self.stopped_by} ({shards}); its shard jobs "
            if self._launch().stopped_at is not None:
                nxt = "the chain was stopped: nothing adopts them until `shardwise launch` runs"
            elif self.successor:
                nxt = f"the next launcher (job {self.successor}, queued) adopts them"
            else:
                nxt = "no successor was queued: run `shardwise launch` again to adopt them"
            self.say(outcome.step, f"{text}keep running; {nxt}")
            return outcome.exit_code
        if not outcome.keep_successor:
            self._cancel_queued()
        if outcome.step is Step.COMPLETE:
            text = f"snakemake finished every target ({shards}): the campaign is complete; "
            self.say(outcome.step, text + "the queued launchers are cancelled and the chain ends")
        elif outcome.step is Step.PROGRESS:
            text = f"snakemake exited {returncode} ({shards}): the next launcher (job "
            self.say(outcome.step, text + f"{self.successor}) goes on", detail=str(returncode))
        else:
            text = f"snakemake exited {returncode} with no shard done in this generation: the "
            text += "chain ends (the next launcher would fail the same way); its log above says "
            text += "why; fix it and run `shardwise launch` again"
            self.say(outcome.step, text, detail=str(returncode))
        return outcome.exit_code


def _die_with(parent: int) -> Callable[[], None]:
    """What the Snakemake child runs between fork and exec: ask the kernel for SIGKILL when
    its parent (this launcher) dies (Linux ``PR_SET_PDEATHSIG``), then exit at once if the
    parent died already (between the fork and the prctl)."""

    def arm() -> None:
        prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)  # Linux only
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def run_generation(run_dir: Path, *, environ: Callable[[str], str | None] = os.environ.get) -> int:
    """The body of a launcher job (``shardwise launch --generation``)."""
    job_id = environ("SLURM_JOB_ID")
    if not job_id:
        msg = "`shardwise launch --generation` is the body of a launcher job (no SLURM_JOB_ID): "
        raise ConfigError(msg + "start the chain with `shardwise launch`")
    return Generation(run_dir=Path(run_dir), job_id=job_id).run()
