"""One top-level process per run directory: the lock it holds while it runs, and what a
dry run says when another process holds it."""

import fcntl
import os
import re
import time
from pathlib import Path
from typing import IO

from shardwise.errors import RunMismatchError

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


def lock_run_dir(run_dir: Path) -> None:
    """Refuse a second top-level Snakemake process on the same run directory (this process
    may plan it again: it holds the lock already)."""
    path = (run_dir / LOCK_FILE).resolve()
    if _held_locks.get(path, (None,))[0] == os.getpid():
        return
    fh = path.open("a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as e:
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
