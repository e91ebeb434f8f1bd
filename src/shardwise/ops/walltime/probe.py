"""Would a shorter walltime start now? The walltime probe of ``shardwise cluster status``.

For the oldest pending job: ``sbatch --test-only`` (nothing submitted) at shorter limits,
bisected to the longest that starts now, plus what the maintenance windows imply: a
visible one's start, or a hidden one (``PrivateData=reservations``) located blind with a
*small* request (:func:`window_options`). ``--test-only`` adds to every answer the time
of the pending jobs ahead in the partition (SLURM's ``_delayed_job_start_time``, see
docs/cluster.md): a window is where its answer *steps* (:func:`step_limit`), which shows
only while that delay ends before the window does; else real 1-CPU allocations
(``salloc --immediate``) that start at once or are revoked locate it. :func:`probe` is pure.
"""

import functools
import math
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from shardwise.ops.common.text import format_duration
from shardwise.slurm import command, control, queries
from shardwise.slurm.pending import waits_for_reservation
from shardwise.slurm.queries import Answer

__all__ = ["waits_for_reservation"]  # re-exported: where the views ask it


class Method(StrEnum):
    """How a row's answer was found."""

    TEST_ONLY = "test-only"  # SLURM's own plan for the run's pending job (sbatch --test-only)
    RESERVATION = "reservation"  # the next visible maintenance window
    INFERRED = "inferred"  # a hidden window, located with small --test-only jobs
    ALLOCATED = "allocated"  # a hidden window, located with real 1-CPU allocations
    PLANNED = "planned"  # SLURM's own plan for probe jobs of the run's request (plan_probe)


@dataclass(frozen=True, kw_only=True)
class Located:
    """A hidden window located blind: it starts at ``start`` (ISO time), ``minutes`` after
    the search, which ``method`` made in ``calls`` SLURM calls and ``seconds``; ``changed``:
    what the search submitted and what became of it (never a job of the user's)."""

    minutes: int
    start: str
    method: Method
    calls: int
    seconds: float
    changed: str


def probe_minutes(own: int | None, shards: int) -> list[int]:
    """Time limits to ask about: the job's own, half, a quarter, one shard's share."""
    if not own:
        return []
    candidates = {own, own // 2, own // 4, math.ceil(own / max(shards, 1))}
    return sorted((m for m in candidates if m >= 1), reverse=True)


def longest_starting_now(
    ask: Callable[[int], Answer[datetime]], asked: list[int], now: datetime
) -> int | None:
    """The longest time limit SLURM would start now (to within 5%), bisecting between the
    limits ``asked`` (or halving below the shortest until one starts): at most ~2 log2(limit)
    ``sbatch --test-only`` calls. None when nothing starts now or SLURM does not answer."""

    def starts_now(minutes: int) -> bool | None:
        answer = ask(minutes)
        if not answer.ok or answer.value is None:
            return None
        return answer.value <= now + timedelta(minutes=1)

    return longest_where(starts_now, asked)


def longest_where(
    good: Callable[[int], bool | None], asked: list[int], *, within: int | None = None
) -> int | None:
    """The longest time limit for which ``good`` holds, ``good`` being true up to some limit
    and false above it: bisecting between the limits ``asked`` (or halving below the
    shortest until one is good) to ``within`` minutes (default 5%). None when no limit is
    good, every asked one is, or ``good`` has no answer (None)."""
    verdicts = {m: good(m) for m in asked}
    if not verdicts or None in verdicts.values() or all(verdicts.values()):
        return None
    found = [m for m, v in verdicts.items() if v]
    if found:
        low = max(found)
        high = min(m for m, v in verdicts.items() if not v and m > low)
    else:
        high, probe, low = min(verdicts), min(verdicts) // 2, 0
        while probe >= 1:  # halve until one is good
            verdict = good(probe)
            if verdict is None:
                return None
            if verdict:
                low = probe
                break
            high, probe = probe, probe // 2
        if low == 0:
            return None
    while high - low > (within or max(1, low // 20)):
        mid = (low + high) // 2
        verdict = good(mid)
        if verdict is None:
            break
        low, high = (mid, high) if verdict else (low, mid)
    return low


#: How far two ``--test-only`` answers may differ and still be "the same start": they are
#: computed at slightly different moments, and a window is at least minutes long.
SAME_START = timedelta(seconds=90)


def step_limit(
    ask: Callable[[int], Answer[datetime]], asked: list[int]
) -> tuple[int | None, Answer[datetime]]:
    """Where a small job's ``--test-only`` answer steps: the longest limit (to the minute)
    answered like a 1-minute job, and that 1-minute answer (its distance from now is the
    delay SLURM adds for the jobs ahead). None when nothing steps up to the longest limit
    asked: no window is in the way, or the delay hides it (it ends after the window)."""
    base = ask(1)
    first = base.value
    if not base.ok or first is None:
        return None, base

    def same(minutes: int) -> bool | None:
        answer = ask(minutes)
        if not answer.ok or answer.value is None:
            return None
        return answer.value <= first + SAME_START

    return longest_where(same, asked, within=1), base


def window_options(detail: dict[str, str], minutes: int) -> list[str]:
    """``sbatch --test-only`` options of a small job at ``minutes`` where the pending job
    would run: same partition, constraints, account, QOS and exclusions; one CPU, 1 MB,
    no GPU, so that the run's own pending jobs cannot stand in its way."""
    return ["-t", str(minutes), "-n", "1", "--cpus-per-task=1", "--mem=1", *_placement(detail)]


def _placement(detail: dict[str, str]) -> list[str]:
    """Where the pending job may run, as sbatch options: partition, account, QOS,
    constraints, excluded nodes (those ``scontrol show job`` names)."""
    opts = []
    for flag, key in (("-p", "Partition"), ("-A", "Account"), ("--qos", "QOS"),
                      ("-C", "Features"), ("--exclude", "ExcNodeList")):  # fmt: skip
        value = detail.get(key)
        if not command.is_null(value):
            opts.extend([flag, str(value)])
    return opts


def planned(detail: dict[str, str] | None) -> bool:
    """Whether backfill has planned the pending job (``Scheduler=Backfill`` or a known
    ``StartTime``): before its first pass ``--test-only`` answers as if the job's whole
    request were ahead of every test (provisional). Unknown details count as planned."""
    if not detail:
        return True
    start = detail.get("StartTime") or ""
    backfill = (detail.get("Scheduler") or "").startswith("Backfill")
    return backfill or start not in ("", "Unknown", "None")


def test_only_options(detail: dict[str, str], minutes: int) -> list[str]:
    """``sbatch --test-only`` options that repeat a pending job's request at ``minutes``."""
    opts = ["-t", str(minutes), *_placement(detail)]
    null = command.is_null
    if not null(detail.get("Reservation")):
        opts.extend(["--reservation", str(detail["Reservation"])])
    cpus = detail.get("CPUs/Task")
    if cpus and cpus.isdigit():
        opts.append(f"--cpus-per-task={cpus}")
    mem_node, mem_cpu = detail.get("MinMemoryNode"), detail.get("MinMemoryCPU")
    if mem_node and not null(mem_node):
        opts.append(f"--mem={mem_node}")
    elif mem_cpu and not null(mem_cpu):
        opts.append(f"--mem-per-cpu={mem_cpu}")
    per_job, per_node = detail.get("TresPerJob", ""), detail.get("TresPerNode", "")
    m = re.search(r"gpu(?::([^:,=]+))?[:=](\d+)", per_job or "")
    if m:
        opts.append(f"--gpus={m.group(1) + ':' if m.group(1) else ''}{m.group(2)}")
    elif re.search(r"gpu", per_node or ""):
        opts.append("--gres=" + per_node.replace("gres:", "").replace("gres/", ""))
    return opts


def visible_window(windows: Answer[list[queries.Reservation]] | None, job: queries.Job) -> bool:
    """Whether a maintenance window ahead is visible for the job's partitions."""
    if windows is None or not windows.ok:
        return False
    parts = [p for p in job.partition.split(",") if p]
    return queries.next_maintenance(windows.value or [], datetime.now(), parts) is not None


def locate_window(request: dict[str, str], asked: list[int], timeout: float) -> Answer[Located]:
    """Where a hidden window starts, and how it was found: where a small job's
    ``--test-only`` answer steps, if the delay SLURM adds for the jobs ahead lets it show;
    else the longest 1-CPU job SLURM allocates at once (``salloc --immediate``)."""
    began, now = time.monotonic(), datetime.now()
    options = functools.partial(window_options, request)
    small: dict[int, Answer[datetime]] = {}
    step, base = step_limit(test_only(small, options, timeout), asked)
    failed = next((a for a in small.values() if not a.ok), None)
    if base.value is None or (step is None and failed is not None):
        return Answer(None, (failed or base).problem, (failed or base).kind)
    if step is not None:
        changed = "nothing: sbatch --test-only submits nothing"
        return Answer(_located(step, Method.INFERRED, len(small), began, changed))
    delay = base.value - now
    if delay <= timedelta(minutes=1):
        why = f"a small job of {max(asked)} min starts now: no window is in this job's way"
        return Answer(None, why, "failed")
    tried: dict[int, Answer[control.Allocation]] = {}

    def granted(minutes: int) -> bool | None:
        if minutes not in tried:
            tried[minutes] = control.try_allocation(options(minutes), timeout)
        answer = tried[minutes]
        return answer.value is control.Allocation.ALLOCATED if answer.ok else None

    found = longest_where(granted, asked, within=1)
    outcomes = Counter(a.value for a in tried.values() if a.ok)
    changed = f"{len(tried)} job(s) of 1 CPU named {control.PROBE_JOB_NAME} (salloc --immediate=1):"
    changed += f" {outcomes[control.Allocation.ALLOCATED]} allocated and given back at once, the "
    changed += "others refused, or revoked after a second and once more after five; no job of "
    changed += "yours was touched"
    if found is not None:
        method = Method.ALLOCATED
        return Answer(_located(found, method, len(small) + len(tried), began, changed))
    failed = next((a for a in tried.values() if not a.ok), None)
    if failed is not None:
        return Answer(None, f"{failed.problem} ({changed})", failed.kind)
    return Answer(None, f"{_unlocated(outcomes, max(tried), delay)} ({changed})", "failed")


def _unlocated(outcomes: Counter, longest: int, delay: timedelta) -> str:
    """Why neither method located the window."""
    if outcomes[control.Allocation.ALLOCATED]:
        return f"a 1-CPU job of {longest} min was allocated at once: no window is in the way"
    why = f"sbatch --test-only adds {format_duration(delay.total_seconds())} for the pending "
    why += "jobs ahead, which hides the window, and no 1-CPU job was allocated at any limit: "
    if outcomes[control.Allocation.OUTRANKED]:
        why += "SLURM refused them for insufficient priority (a runnable job of higher priority "
        return why + "pends in the partition, perhaps hidden from you); ask again in a minute"
    return why + "the window may be open already, or the partition's nodes are full"


def _located(minutes: int, method: Method, calls: int, began: float, changed: str) -> Located:
    """A window ``minutes`` from now, found by ``method`` in ``calls`` since ``began``."""
    start = (datetime.now() + timedelta(minutes=minutes)).isoformat(timespec="seconds")
    seconds = round(time.monotonic() - began, 1)
    return Located(
        minutes=minutes, start=start, method=method, calls=calls, seconds=seconds, changed=changed
    )


def clear_leftover_probes(user: str, queue: Answer[list[queries.Job]], timeout: float) -> int:
    """Wait a few seconds for window probes a killed ``cluster status`` left (each ends
    within a second on its own), then cancel any still queued; how many there were."""
    probes = control.PROBE_JOB_NAME
    left = [j.id for j in queue.value or [] if j.name == probes]
    deadline = time.monotonic() + 5
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        again = queries.jobs(user, timeout=timeout)
        left = [j.id for j in again.value or [] if j.name == probes and j.id in left]
    if left:
        control.cancel(left, timeout=timeout)
    return len(left)


def test_only(
    answers: dict[int, Answer[datetime]], options: Callable[[int], list[str]], timeout: float
) -> Callable[[int], Answer[datetime]]:
    """``sbatch --test-only`` at a time limit, each limit asked once (kept in ``answers``)."""

    def ask(minutes: int) -> Answer[datetime]:
        if minutes not in answers:
            answers[minutes] = queries.test_only(options(minutes), timeout=timeout)
        return answers[minutes]

    return ask
