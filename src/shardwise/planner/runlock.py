"""One top-level process per run directory: the lock it holds while it runs, what a dry
run says when another process holds it, and the orphan a killed launcher left.

An orphan is a main process whose SLURM job has ended while it runs on: where SLURM tracks
processes by tree (``proctrack/linuxproc``, ``pgid``), a launcher killed outright can
leave its Snakemake, in its own session, behind. It holds the run's lock and drives the
run from no job at all. The next top-level process that finds it on its own host ends it
(SIGKILL to its process group: its shard jobs live on, as with a launcher's own stop) and
takes the lock, with one line; one on another host is waited for
(``ops/launch/generation.py``), never refused as a second run.
"""

import contextlib
import fcntl
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from shardwise.errors import RunMismatchError
from shardwise.run import claims
from shardwise.slurm import queries

LOCK_FILE = ".shardwise.lock"
#: Run-dir locks this process holds, for its whole life (by pid: a fork holds none).
_held_locks: dict[Path, tuple[int, IO[str]]] = {}


#: The lock file's one line: who holds the run directory (``_holder_line``).
_HOLDER = re.compile(r"pid (?P<pid>\d+) on (?P<host>\S+) since ")


def _holder_line() -> str:
    """What the lock holder writes into the lock file (read by ``_HOLDER``)."""
    return f"pid {os.getpid()} on {os.uname().nodename} since {time.ctime()}\n"


def live_run_note(run_dir: Path) -> list[str]:
    """A dry run beside a live run: say so (Snakemake prints its own "Directory cannot be
    locked" error under the report, and still exits 0). Read from the lock file's holder
    line, never by taking the lock (a real run starting then would be refused)."""
    try:
        holder = (run_dir / LOCK_FILE).read_text("utf-8").strip()
    except OSError:
        return []
    found = _HOLDER.match(holder)
    if found is None:
        return []
    pid, host = int(found["pid"]), found["host"]
    if host != os.uname().nodename or pid == os.getpid():
        return []  # another host's holder cannot be checked from here
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return []  # it ended: the line is what the last holder left
    except PermissionError:
        pass  # alive, another user's
    text = f"note: a live run holds {run_dir} ({holder}): this dry run only reports, it changes "
    text += "nothing; Snakemake's 'Directory cannot be locked' error below is about that run"
    return [text]


#: Seconds to wait for the lock after ending an orphan (its exit releases the flock).
TAKEOVER_SECONDS = 30.0


@dataclass(frozen=True)
class Orphan:
    """The recorded main process of the run (``claims/workflow.json``), alive or not
    checkable, whose SLURM job has ended."""

    pid: int
    host: str
    job_id: str
    state: str  # SLURM's state of its job ("" once squeue no longer lists it)
    process: str | None = None

    @property
    def here(self) -> bool:
        """Whether it runs on this host (where it can be ended)."""
        return self.host == claims.hostname()

    def describe(self) -> str:
        ended = self.state or "no longer listed"
        job = f"SLURM job {self.job_id} ({ended})"
        return f"pid {self.pid} on {self.host}, the main process of {job}"


def orphan(run_dir: Path, *, job_state: Callable[[str], str | None] | None = None) -> Orphan | None:
    """The run's recorded main process, if its SLURM job has ended and it may still run
    (alive on this host, or on another host that cannot be checked); None otherwise.
    ``job_state`` (tests): SLURM's state of a job, "" when unlisted, None: no answer."""
    recorded = claims.Submitter.recorded(run_dir)
    if recorded is None or not recorded.slurm_job_id:
        return None
    if recorded.slurm_job_id == os.environ.get("SLURM_JOB_ID"):
        return None  # this job's own
    state = (job_state or _job_state)(recorded.slurm_job_id)
    if state is None or (state in queries.LIVE_STATES and state != "COMPLETING"):
        return None  # its job runs (or SLURM does not say): not an orphan
    found = Orphan(recorded.pid, recorded.host, recorded.slurm_job_id, state, recorded.process)
    if found.here and not claims.process_alive(found.pid, found.process):
        return None  # it is gone: its lock went with it
    return found


def end_orphan(found: Orphan) -> str:
    """SIGKILL an orphan on this host (its process group: Snakemake ran in a session of
    its own; its shard jobs live on, as after a launcher's own stop); the line to say."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(found.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(found.pid, signal.SIGKILL)
    text = f"note: the run was held by {found.describe()}: an orphan driving the run from no "
    return text + "job; ended it (its shard jobs keep running and are adopted) and took over"


def _job_state(job_id: str) -> str | None:
    """SLURM's state of one job; "" once squeue no longer lists it; None: no answer."""
    answer = queries.job_states([job_id])
    return (answer.value or {}).get(job_id, "") if answer.ok else None


def lock_run_dir(
    run_dir: Path, *, job_state: Callable[[str], str | None] | None = None
) -> list[str]:
    """Refuse a second top-level Snakemake process on the same run directory (this process
    may plan it again: it holds the lock already). An orphan on this host holding it is
    ended first (:func:`end_orphan`); the lines to say."""
    path = (run_dir / LOCK_FILE).resolve()
    if _held_locks.get(path, (None,))[0] == os.getpid():
        return []
    fh = path.open("a+")
    said: list[str] = []
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as e:
        found = orphan(run_dir, job_state=job_state)
        if found is not None and found.here:
            said.append(end_orphan(found))
        if not said or not _wait_for_lock(fh, TAKEOVER_SECONDS):
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            msg = f"{run_dir} is in use by {holder}; two runs on one run directory would race. "
            msg += "Wait for it to finish (or stop it), then run again."
            raise RunMismatchError(msg) from e
    fh.seek(0)
    fh.truncate()
    fh.write(_holder_line())
    fh.flush()
    _held_locks[path] = (os.getpid(), fh)
    return said


def _wait_for_lock(fh: IO[str], seconds: float) -> bool:
    """Take ``fh``'s lock once its holder has exited (a killed process's flock goes with
    it), within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            time.sleep(0.05)
            continue
        return True
    return False
