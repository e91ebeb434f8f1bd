"""A pause a shard job honours, so that tests which race a run wait for an event, not time.

Never set in production. :func:`moment` names the points of a job's start (models
checked, loaded) where an in-process test acts (``on_moment``: a callback, None in
production). With ``SHARDWISE_TEST_GATE=<dir>`` a job stops after its
``SHARDWISE_TEST_GATE_AFTER``-th labelled file, writes ``<dir>/<shard>.waiting`` and goes
on once ``<dir>/open`` exists (or after ``SHARDWISE_TEST_GATE_TIMEOUT`` s, default 900).
"""

import os
import time
from collections.abc import Callable
from pathlib import Path

from shardwise.store.atomic import write_atomic

GATE_ENV = "SHARDWISE_TEST_GATE"
AFTER_ENV = "SHARDWISE_TEST_GATE_AFTER"
TIMEOUT_ENV = "SHARDWISE_TEST_GATE_TIMEOUT"
#: The file whose existence opens the gate for every job.
OPEN = "open"
#: Tests only: called with the name of each point of a job's start (see :func:`moment`).
on_moment: Callable[[str], None] | None = None


def moment(name: str) -> None:
    """A named point of a shard job's start; a test's ``on_moment`` acts there."""
    if on_moment is not None:
        on_moment(name)


def pause(shard: int, labelled: int) -> None:
    """Stop here if a test gate is set for a job that has labelled ``labelled`` files."""
    gate = os.environ.get(GATE_ENV)
    if not gate or labelled != int(os.environ.get(AFTER_ENV, "0")):
        return
    directory = Path(gate)
    directory.mkdir(parents=True, exist_ok=True)
    job = os.environ.get("SLURM_JOB_ID", "-")
    # in one rename: a test that lists the gate never reads a file still empty
    write_atomic(directory / f"{shard}.waiting", f"{os.getpid()} {job}\n".encode())
    deadline = time.monotonic() + float(os.environ.get(TIMEOUT_ENV, "900"))
    while not (directory / OPEN).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
