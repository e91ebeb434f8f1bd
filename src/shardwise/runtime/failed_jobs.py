"""A failed shard job's reason on the console; the run stops early on a shared one.

Snakemake 9.27 says ``message: None`` for a failed job: :func:`install` wraps
``Job.log_error`` and ``GroupJob.log_error`` to put each shard's reason (its failure
record) there, once per reason, and stops the run when the first ``stop_after`` shards to
fail, before any succeeded, failed for one *shared* reason (no retry fixes it).
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from shardwise.run import failures, markers, ranges

_MARK = "_shardwise_failed_jobs"
#: A record at most this much older than the hook (clocks of login and compute
#: nodes differ by a little) is of this invocation.
_CLOCK_SLACK_S = 5.0
#: How much of a job log's last line a reason quotes when the job wrote no record.
_LOG_LINE_CHARS = 300


@dataclass(kw_only=True)
class FailureLog:
    """The failed shards of one invocation, by reason (what the console has said)."""

    run_dir: Path
    since: float  # the epoch time the invocation started (records before are older runs)
    stop_after: int = 2
    done_at_start: frozenset[int] = frozenset()
    by_reason: dict[str, list[int]] = field(default_factory=dict)
    shared: dict[str, bool] = field(default_factory=dict)
    stopped: str | None = None  # the reason the run was stopped for

    def reason_of(self, shard: int) -> failures.Cause | None:
        """The cause of the shard's failure in this invocation (its newest record), if any."""
        record = failures.latest(self.run_dir, shard)
        if record is not None and _epoch(record.at) >= self.since - _CLOCK_SLACK_S:
            return failures.Cause(record.kind, record.reason, record.shared)
        return None

    def causes(self, members: list[tuple[int, str | None]]) -> list[tuple[int, failures.Cause]]:
        """The failed shards of one job and their causes: members without a record did not
        run (left out when another says why); when none has one, the job was killed."""
        found = [(shard, self.reason_of(shard)) for shard, _log in members]
        known = [(shard, cause) for shard, cause in found if cause is not None]
        if known:
            return known
        return [(shard, _killed(log)) for shard, log in members]

    def add(self, shard: int, cause: failures.Cause) -> str:
        """Note one failed shard; the line the console shows for it."""
        shards = self.by_reason.setdefault(cause.reason, [])
        self.shared[cause.reason] = cause.shared
        if shard in shards:  # a retry
            return f"shard {shard} failed again, for the same reason"
        shards.append(shard)
        if len(shards) == 1:
            return f"shard {shard} failed: {cause.reason}"
        text = f"shard {shard} failed: the same reason as shard {shards[0]} "
        return text + f"({len(shards):,} shards so far)"

    def should_stop(self, done_now: set[int]) -> str | None:
        """The shared reason to stop the run for, or None to go on."""
        if self.stopped is not None or self.stop_after <= 0:
            return None
        if done_now - self.done_at_start:  # some shard succeeded: not the first jobs
            return None
        failed = sum(len(s) for s in self.by_reason.values())
        for reason, shards in self.by_reason.items():
            if self.shared[reason] and len(shards) == failed and failed >= self.stop_after:
                self.stopped = reason
                return reason
        return None

    def stop_line(self) -> str:
        """What the console says when the run stops early."""
        shards = self.by_reason.get(self.stopped or "", [])
        text = f"stopping the run: the first {len(shards):,} shards to fail all failed for "
        text += f"shard {shards[0] if shards else '?'}'s reason (above), which no retry can fix. "
        text += "No new shard job is started and none is retried; running ones finish. Fix the "
        text += "cause and run again (failures.stop_after: 0 in the config keeps going regardless)."
        return text

    def summary(self) -> list[str]:
        """One line per reason with its count and shards, most frequent first."""
        if not self.by_reason:
            return []
        total = sum(len(s) for s in self.by_reason.values())
        lines = [f"{total:,} shard(s) failed in this run, for {len(self.by_reason):,} reason(s):"]
        for reason, shards in sorted(self.by_reason.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {len(shards):,} (shards {ranges.compress(shards)}): {reason}")
        text = f"Each shard's failure records: {self.run_dir}/{failures.FAILURES_DIR}/<shard>/; "
        lines.append(text + "`shardwise coverage` names the failing files.")
        return lines


def _killed(log: str | None) -> failures.Cause:
    """The cause of a job that wrote no failure record, with its log's last line."""
    last = _last_line(log)
    said = f"; its log ends: {last}" if last else ""
    why = "the job wrote no failure record (killed before it could: out of memory, a node "
    return failures.Cause("killed", f"{why}failure, or it never started){said}")


def _epoch(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0


def _last_line(log: str | None) -> str:
    """The last non-empty line of a job log (progress bars' carriage returns dropped)."""
    if not log:
        return ""
    try:
        with Path(log).open("rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 8192))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [part.strip() for line in tail.splitlines() for part in line.split("\r")]
    last = next((line for line in reversed(lines) if line), "")
    return last[:_LOG_LINE_CHARS]


def _shard_of(job: Any) -> int | None:
    """The shard of a classify job (None for any other rule)."""
    if getattr(getattr(job, "rule", None), "name", None) != "classify":
        return None
    value = getattr(job, "wildcards_dict", {}).get("shard")
    return int(value) if value is not None and str(value).isdigit() else None


def _log_of(job: Any) -> str | None:
    logs = list(getattr(job, "log", None) or ())
    return str(logs[0]) if logs else None


def install(
    workflow: Any, run_dir: Path, *, stop_after: int, now: Callable[[], float]
) -> FailureLog | None:
    """Hook failed-job reporting in the top-level Snakemake process (once); the log."""
    try:
        from snakemake.jobs import GroupJob, Job  # noqa: PLC0415 - Snakemake's own process only
        from snakemake.logging import logger  # noqa: PLC0415 - with the jobs
    except ImportError:  # pragma: no cover - shardwise always runs with Snakemake
        return None
    at_start = frozenset(markers.done_shards(Path(run_dir)))
    book = FailureLog(
        run_dir=Path(run_dir), since=now(), stop_after=stop_after, done_at_start=at_start
    )
    lock = threading.Lock()

    def after_failure(job: Any, members: list[Any]) -> tuple[dict[int, str], list[str]]:
        """Per failed member (by ``id``), its line; and lines to log after Snakemake's."""
        said: dict[int, str] = {}
        done = markers.done_shards(book.run_dir)
        failed = {_shard_of(m): (id(m), _log_of(m)) for m in members}
        failed = {s: v for s, v in failed.items() if s is not None and s not in done}
        with lock:
            causes = book.causes([(s, log) for s, (_i, log) in failed.items()])  # type: ignore[misc]
            for shard, cause in causes:
                said[failed[shard][0]] = book.add(shard, cause)
            after = [book.stop_line()] if book.should_stop(done) is not None else []
            if book.stopped is not None:
                scheduler = getattr(workflow, "scheduler", None)
                if scheduler is not None:
                    scheduler.keepgoing = False
            if book.stop_after and (book.stopped or any(c.shared for _s, c in causes)):
                job.attempt = job.restart_times + 1  # no retry: it would fail the same way
        return said, after

    _active["after_failure"] = after_failure
    _wrap_job(Job, logger)
    _wrap_group(GroupJob, logger)
    return book


#: The hook of the latest install (a process that parses the Snakefile again gets a new
#: log; the wrappers are installed once).
_active: dict[str, Callable[[Any, list[Any]], tuple[dict[int, str], list[str]]]] = {}
#: While a group job's error is logged: its members' lines (Snakemake logs each member).
_group = threading.local()


def _install(cls: type, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace ``cls.log_error`` by ``wrap(original)``, once (a marked one stays)."""
    original = cls.log_error
    if getattr(original, _MARK, False):
        return
    wrapped = wrap(original)
    setattr(wrapped, _MARK, True)
    wrapped.__doc__ = original.__doc__
    cls.log_error = wrapped


def _wrap_job(cls: type, logger: Any) -> None:
    """Wrap ``Job.log_error`` (once): the shard's line becomes the error's ``message``."""

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def log_error(self: Any, msg: Any = None, *args: Any, **kwargs: Any) -> Any:
            members = getattr(_group, "lines", None)
            after: list[str] = []
            if members is not None:  # a member of a group job: the group said it already
                line = members.get(id(self))
            else:
                said, after = _active["after_failure"](self, [self])
                line = said.get(id(self))
            if line:
                msg = f"{msg}\n{line}" if msg else line
            result = original(self, msg, *args, **kwargs)
            _say_after(logger, after)
            return result

        return log_error

    _install(cls, wrap)


def _wrap_group(cls: type, logger: Any) -> None:
    """Wrap ``GroupJob.log_error`` (once): each failed member's block gets its line."""

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def log_error(self: Any, msg: Any = None, *args: Any, **kwargs: Any) -> Any:
            said, after = _active["after_failure"](self, list(self.jobs))
            _group.lines = said
            try:
                result = original(self, msg, *args, **kwargs)
            finally:
                _group.lines = None
            _say_after(logger, after)
            return result

        return log_error

    _install(cls, wrap)


def _say_after(logger: Any, after: list[str]) -> None:
    """The lines a failure adds after Snakemake's error block (stop, same reason)."""
    for text in after:
        logger.error(f"shardwise: {text}")
