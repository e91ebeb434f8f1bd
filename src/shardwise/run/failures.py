"""Failure records: ``<run_dir>/failures/<shard>/<utc time>-<pid>.json``, one per failed attempt.

Written before a failing job exits, so a person sees which file stopped it and why without
the job log: ``reason`` is the one line the console shows (``runtime/failed_jobs.py``);
``shared`` says no retry can fix it (a field no file has, a model that cannot load): the
run stops early on it. A shard with records and no marker is "failing" in the views, or
"interrupted" when its latest attempt was stopped by a signal.
"""

import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

import numpy as np

from shardwise.errors import (
    ConfigError,
    DeviceError,
    FieldMissingError,
    ModelError,
    ShardClaimedError,
    ShardwiseError,
    StorageError,
)
from shardwise.run import markers
from shardwise.run.fields import field_advice
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic

FAILURES_DIR = "failures"


@dataclass(frozen=True)
class FailedFile:
    """One file that failed in an attempt, and its error (the record's ``failed``)."""

    file: str
    error: str = ""


@dataclass(frozen=True)
class Cause:
    """Why a shard job failed, as the console and the early stop need it."""

    kind: str  # config | model | device | storage | claimed | input | error, or a STOP_KINDS one
    reason: str  # one line
    shared: bool = False  # the same for every shard and no retry fixes it


def first_line(text: str) -> str:
    """The first non-empty line of an error message."""
    return next((line.strip() for line in text.splitlines() if line.strip()), text.strip())


#: A whole-shard failure's kind by the exception's type, the first that matches (a
#: DeviceError is a ModelError too): (type, kind, shared by every shard).
_CAUSES: tuple[tuple[type[BaseException], str, bool], ...] = (
    (DeviceError, "device", False),
    (ModelError, "model", True),
    (ConfigError, "config", True),
    (StorageError, "storage", False),
    (ShardClaimedError, "claimed", False),  # another job (another site's) holds the shard
    (ShardwiseError, "input", False),
)


def cause_of(exc: BaseException, where: str = "") -> Cause:
    """The cause of a whole-shard failure: a model that cannot load, a missing device and
    a config error are shared; a device failing mid-run (one GPU), storage and the rest may
    be fixed by a retry elsewhere."""
    said = str(exc) if isinstance(exc, ShardwiseError) else f"{type(exc).__name__}: {exc}"
    text = first_line(said)
    text = f"{where}: {text}" if where and not text.startswith(where) else text
    kind, shared = next(((k, s) for t, k, s in _CAUSES if isinstance(exc, t)), ("error", False))
    if kind == "storage":
        text = f"{text}; {STORE_ADVICE}"
    return Cause(kind, text, shared=shared)


#: What to do when the store, not a file, stopped a shard (never "quarantine the file").
STORE_ADVICE = (
    "the store did not answer, not the files: run again once it answers "
    "(`snakemake -n` lists the input through it), and leave the files in"
)


def cause_of_files(errors: Sequence[BaseException], files: int, labelled: int, hint: str) -> Cause:
    """The cause of a shard whose files failed one by one: the same absent field in every
    file and none labelled is a shared config mistake (said in the same words by every
    shard); a store that stopped answering stopped the shard (what was tried, what was
    not); else the files: how many of those tried failed, the first error, and ``hint``."""
    fields = {(e.config_key, e.path) for e in errors if isinstance(e, FieldMissingError)}
    if errors and not labelled and len(fields) == 1 and len(errors) == files:
        first = errors[0]
        assert isinstance(first, FieldMissingError)
        advice = field_advice(first.config_key, first.path, first.found, "nothing was written")
        text = f"{first.config_key} {first.path!r} is in no row of any file; {advice}"
        return Cause("config", text, shared=True)
    tried = labelled + len(errors)
    store = next((e for e in errors if isinstance(e, StorageError)), None)
    if store is not None:  # the store, not the files: the job stopped at the first of them
        text = f"stopped after {tried:,} of {files:,} file(s) tried ({labelled:,} labelled, "
        text += f"{files - tried:,} not tried): {first_line(str(store))}; {STORE_ADVICE}"
        return Cause("storage", text)
    more = f" (and {len(errors) - 1:,} more)" if len(errors) > 1 else ""
    text = f"{len(errors):,} of {tried:,} file(s) tried failed: {first_line(str(errors[0]))}{more}"
    return Cause("input", f"{text} {hint}".strip())


INTERRUPTED = Cause(
    "interrupted",
    "interrupted (SIGTERM or SIGINT: walltime, preemption or "
    "Ctrl-C); finished files stay done, the shard runs again",
)

#: A job stopped by a signal, by what sent it: ``walltime`` (SLURM's warning before the
#: limit: the retry asks for a longer one), ``cancelled`` (a user's or an admin's
#: ``scancel``: the retry keeps its walltime), ``fit_too_short`` (the walltime fit had
#: lowered the job, and it was cut before its first file: that counts against the fit's
#: floor, not as a reason to double the walltime), ``interrupted`` (preemption, Ctrl-C, or
#: a cause SLURM could not tell), ``preempted`` (``PreemptTime`` set: requeued).
STOP_KINDS = ("interrupted", "walltime", "cancelled", "fit_too_short", "preempted")
#: The stops a retry answers with a longer walltime.
LONGER_AFTER = ("walltime",)


def walltime_stop(limit: int | None, labelled: int) -> Cause:
    """SLURM's warning before the job's limit stopped it."""
    at = f" ({limit} min)" if limit else ""
    text = f"stopped at its walltime{at} after {labelled:,} file(s) of this attempt; finished "
    return Cause("walltime", text + "files stay done, and the retry asks for a longer walltime")


def fit_too_short(limit: int | None) -> Cause:
    """Cut at a limit the walltime fit lowered, before the job's first file."""
    at = f" of {limit} min" if limit else ""
    text = f"stopped at the walltime{at} the fit lowered it to, before its first file: the "
    text += "fit's floor rises above it, and the retry keeps its walltime"
    return Cause("fit_too_short", text)


def preempted(where: str) -> Cause:
    """SLURM preempted the job (``PreemptTime`` set): requeued, by SLURM or by the job."""
    text = f"preempted{where}: the job goes back to the queue and its shards resume from their "
    return Cause("preempted", text + "last finished file; no retry is spent")


def cancelled(state: str) -> Cause:
    """A user's or an admin's ``scancel`` of a running job."""
    text = f"cancelled by a user or an admin (scancel; SLURM ended it before its limit, {state}); "
    text += "finished files "
    return Cause("cancelled", text + "stay done, and the retry keeps its walltime")


def record_failure(
    run_dir: Path,
    shard: int,
    failed: Sequence[FailedFile],
    *,
    cause: Cause,
    limit: int | None = None,
) -> Path:
    """Write a failure record for this attempt under ``<run_dir>/failures/<shard>/``."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    path = Path(run_dir) / FAILURES_DIR / str(shard) / f"{stamp}-{os.getpid()}.json"
    write_atomic(path, FailureRecord.of(shard, failed, cause, limit).to_json())
    return path


@dataclass(frozen=True, kw_only=True)
class FailureRecord:
    """One failed attempt of a shard: the file's keys (``interrupted`` is written for
    older readers, derived from ``kind``), and ``path``, where it was read from."""

    shard: int
    failed: tuple[FailedFile, ...] = ()
    kind: str = "error"
    reason: str = ""
    shared: bool = False
    slurm_job_id: str | None = None
    attempt: str | None = None
    hostname: str = ""
    at: str = ""
    limit_minutes: int | None = None  # the job's time limit when a signal stopped it
    path: Path | None = None

    @property
    def interrupted(self) -> bool:
        """Stopped by a signal, not failed: the shard simply runs again."""
        return self.kind in STOP_KINDS

    @classmethod
    def of(
        cls, shard: int, failed: Sequence[FailedFile], cause: Cause, limit: int | None = None
    ) -> Self:
        """This attempt's record, stamped with the job, host and time."""
        return cls(
            limit_minutes=limit,
            shard=shard,
            failed=tuple(failed),
            kind=cause.kind,
            reason=cause.reason,
            shared=cause.shared,
            slurm_job_id=os.environ.get("SLURM_JOB_ID"),
            attempt=os.environ.get("SHARDWISE_ATTEMPT"),
            hostname=os.uname().nodename,
            at=markers.now(),
        )

    def to_json(self) -> bytes:
        """The file's bytes."""
        body = {k: v for k, v in asdict(self).items() if k != "path"}
        return json_bytes({**body, "interrupted": self.interrupted})

    @classmethod
    def from_json(cls, raw: bytes, where: str, path: Path | None = None) -> Self:
        """A record; one written before ``kind`` and ``reason`` existed gets them derived."""
        f = Fields.parse(raw, where)
        record = f.into(cls, path=path)
        if f.str("kind", None) is None and f.bool("interrupted", False):
            record = replace(record, kind="interrupted")
        if not record.reason:
            failed = record.failed
            derived = first_line(failed[0].error) if failed else "no reason recorded"
            record = replace(record, reason=INTERRUPTED.reason if record.interrupted else derived)
        return record


def records(run_dir: Path, shard: int) -> list[FailureRecord]:
    """The shard's readable failure records, newest first (names sort by time)."""
    folder = Path(run_dir) / FAILURES_DIR / str(shard)
    try:
        names = sorted((p for p in folder.iterdir() if p.suffix == ".json"), reverse=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for path in names:
        try:
            found.append(FailureRecord.from_json(path.read_bytes(), str(path), path))
        except (OSError, ValueError, TypeError, AttributeError):
            continue  # half-written by a killed job, or foreign
    return found


def latest(run_dir: Path, shard: int) -> FailureRecord | None:
    """The shard's newest readable failure record, or None."""
    found = records(run_dir, shard)
    return found[0] if found else None


def longer_walltimes(run_dir: Path, shard: int, attempt: int) -> int:
    """How many times a retry of the shard doubles its walltime in this invocation's
    ``attempt``: once per stop at its walltime (or failure), never for a cancel, a
    preemption, a cut the walltime fit caused, or an attempt that left no record (a group
    member that never started, a job killed for its memory: the walltime was not the
    cause; a stop at it is always recorded). The newest ``attempt - 1`` records count: an
    earlier invocation's do not carry over."""
    if attempt <= 1:
        return 0
    stops = records(run_dir, shard)[: attempt - 1]
    return sum(1 for r in stops if r.kind in LONGER_AFTER or not r.interrupted)


def fit_floor(run_dir: Path, shards: Sequence[int]) -> int:
    """The shortest limit the walltime fit may set for these shards: above every limit at
    which the fit's lowered jobs of theirs were cut before their first file (0: none)."""
    cut = [r.limit_minutes or 0 for s in shards for r in records(run_dir, s)
           if r.kind == "fit_too_short"]  # fmt: skip
    return max(cut, default=-1) + 1


def failing_shards(run_dir: Path, done: np.ndarray) -> np.ndarray:
    """Shards with a ``failures/<shard>/`` folder and no marker (one listing)."""
    found = sorted(markers.numbered(Path(run_dir) / FAILURES_DIR))
    return np.setdiff1d(np.array(found, dtype=np.int64), done)


def set_aside(run_dir: Path) -> Path | None:
    """Move the failure records under ``failures-before-repin-<time>/`` (a re-pin)."""
    failures = Path(run_dir) / FAILURES_DIR
    if not failures.is_dir():
        return None
    target = Path(run_dir) / f"{FAILURES_DIR}-before-repin-{time.strftime('%Y%m%dT%H%M%S')}"
    failures.rename(target)
    return target
