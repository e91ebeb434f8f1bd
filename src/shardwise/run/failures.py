"""Failure records: ``<run_dir>/failures/<shard>/<utc time>-<pid>.json``, one per failed attempt.

A shard job that fails (files it could not read, a model or device error, SIGTERM)
writes ``{shard, failed: [{file, error}], interrupted, slurm_job_id, attempt,
hostname, at}`` before it exits, so a person sees which file stopped it and why
without opening the job log. Records are kept; a shard with records and no marker is
"failing" in the views.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from shardwise.run import markers
from shardwise.store.atomic import json_bytes, write_atomic

FAILURES_DIR = "failures"


def record_failure(
    run_dir: Path, shard: int, failed: list[dict[str, str]], *, interrupted: bool
) -> Path:
    """Write a failure record for this attempt under ``<run_dir>/failures/<shard>/``."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    path = Path(run_dir) / FAILURES_DIR / str(shard) / f"{stamp}-{os.getpid()}.json"
    write_atomic(
        path,
        json_bytes(
            {
                "shard": shard,
                "failed": failed,
                "interrupted": interrupted,
                "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                "attempt": os.environ.get("SHARDWISE_ATTEMPT"),
                "hostname": os.uname().nodename,
                "at": markers.now(),
            }
        ),
    )
    return path


def failing_shards(run_dir: Path, done: np.ndarray) -> np.ndarray:
    """Shards with a ``failures/<shard>/`` folder and no marker (one listing)."""
    found: list[int] = []
    try:
        with os.scandir(Path(run_dir) / FAILURES_DIR) as entries:
            found = [int(e.name) for e in entries if e.name.isascii() and e.name.isdigit()]
    except (FileNotFoundError, NotADirectoryError):
        return np.zeros(0, np.int64)
    return np.setdiff1d(np.array(found, dtype=np.int64), done)


def set_aside(run_dir: Path) -> Path | None:
    """Move the failure records under ``failures-before-repin-<time>/`` (a re-pin)."""
    failures = Path(run_dir) / FAILURES_DIR
    if not failures.is_dir():
        return None
    target = Path(run_dir) / f"{FAILURES_DIR}-before-repin-{time.strftime('%Y%m%dT%H%M%S')}"
    failures.rename(target)
    return target
