"""A pause a shard job honours, so that tests which race a run wait for an event, not time.

Never set in production. A test that kills, stops or restarts a run around its shard
jobs sets ``SHARDWISE_TEST_GATE=<dir>`` in the jobs' environment; each shard job then
stops at one point, says so by creating ``<dir>/<shard>.waiting`` (holding its pid and
SLURM job id), and goes on only once
``<dir>/open`` exists. The test waits for the ``.waiting`` files (the event: the job holds
its claim and has done exactly what the test wants), does its kill or restart, and
opens the gate. The race then happens at the same point on a fast machine and on one
where every ``snakemake`` call takes ten seconds to start.

``SHARDWISE_TEST_GATE_AFTER=N`` (default 0) puts the stop after the job's N-th labelled
file (0: before the first), for kills mid-shard. A gate nobody opens lets the job go on
after ``SHARDWISE_TEST_GATE_TIMEOUT`` seconds (default 900): a failed test must not leave
jobs waiting forever. The wait sleeps in the main thread, so SIGTERM stops it as it
stops labelling.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

GATE_ENV = "SHARDWISE_TEST_GATE"
AFTER_ENV = "SHARDWISE_TEST_GATE_AFTER"
TIMEOUT_ENV = "SHARDWISE_TEST_GATE_TIMEOUT"
#: The file whose existence opens the gate for every job.
OPEN = "open"


def pause(shard: int, labelled: int) -> None:
    """Stop here if a test gate is set for a job that has labelled ``labelled`` files."""
    gate = os.environ.get(GATE_ENV)
    if not gate or labelled != int(os.environ.get(AFTER_ENV, "0")):
        return
    directory = Path(gate)
    directory.mkdir(parents=True, exist_ok=True)
    job = os.environ.get("SLURM_JOB_ID", "-")
    (directory / f"{shard}.waiting").write_text(f"{os.getpid()} {job}\n")
    deadline = time.monotonic() + float(os.environ.get(TIMEOUT_ENV, "900"))
    while not (directory / OPEN).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
