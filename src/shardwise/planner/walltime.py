"""Walltime of a classify job, from the shard's input size and the measured speed.

``minutes = size / rate * safety_factor * (1 + stops at the walltime)``, clamped to ``[min_minutes,
max_minutes]``; the rate is the p10 of input bytes per second over the run's stats, or
``default_mb_per_minute`` before any. Short, honest walltimes get jobs backfilled and
started before maintenance windows; a group of K shards asks for the sum.
"""

import json
import math
import random
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from shardwise.config import Settings, WalltimeSettings
from shardwise.run import adaptation, failures, outputs, plan
from shardwise.run.throughput import NEED_PERCENTILE, FileNeed, file_needs, rate_for_walltime
from shardwise.slurm.profile import SIGNAL_EARLY_S, SIGNAL_LEAD_S
from shardwise.store.location import Location

#: Stats files sampled to estimate the rate (enough for a stable p10, cheap to read).
RATE_SAMPLE = 400


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """A runtime and why."""

    shard: int
    bytes: int
    rate_bytes_per_s: float
    measured: bool
    minutes: int

    def explain(self) -> str:
        """One line for ``shardwise walltime``."""
        source = "measured p10" if self.measured else "configured default"
        rate = f"{self.rate_bytes_per_s / 1e6:.3f} MB/s ({source})"
        return f"shard {self.shard}: {self.bytes / 1e6:.1f} MB at {rate} -> {self.minutes} min"


def minutes_for(
    size_bytes: int, rate_bytes_per_s: float, walltime: WalltimeSettings, attempt: int = 1
) -> int:
    """The clamped runtime in whole minutes for ``size_bytes`` of input."""
    raw = size_bytes / rate_bytes_per_s / 60 * walltime.safety_factor * max(attempt, 1)
    return int(min(max(math.ceil(raw), walltime.min_minutes), walltime.max_minutes))


def default_rate(walltime: WalltimeSettings) -> float:
    """Bytes per second from the configured MB per minute."""
    return walltime.default_mb_per_minute * 1e6 / 60


def sampled_stats(output: Location, sample: int = RATE_SAMPLE, seed: int = 0) -> list[dict]:
    """The figures of a sample of the run's stats files (one unreadable is left out)."""
    names = sorted(outputs.scan(output.list_names()).of(outputs.STATS))
    random.Random(seed).shuffle(names)
    stats = []
    for rel in names[:sample]:
        where = outputs.STATS.rel(rel)
        try:
            stats.append(outputs.STATS.parse(output.read_bytes(where), output.url(where)).figures())
        except (FileNotFoundError, ValueError):
            continue  # one unreadable stats file must not stop the planning
    return stats


def measured_rate(
    output: Location, sample: int = RATE_SAMPLE, seed: int = 0, *, per_kind: bool = False
) -> float | None:
    """p10 of input bytes per second over a sample of the run's stats files (``per_kind``:
    the slowest GPU kind's p10: a job may start on any kind its partitions hold)."""
    stats = sampled_stats(output, sample, seed)
    return rate_for_walltime(stats, per_kind=per_kind) if stats else None


#: A job's start-up before its first file, before any job of the run has recorded its own
#: (``FileStats.startup_s``): Snakemake's job step, the models' load and self-checks.
STARTUP_UNMEASURED_S = 60


#: Seconds the measured rate is reused by a long-lived process (the workflow's walltime
#: adaptation) before the run's stats are sampled again: the floor follows the files as
#: they finish, never a rate frozen at the process's start.
RATE_REFRESH_S = 120.0


@cache
def _context(
    run_dir: str, output_uri: str, storage: Any
) -> tuple[dict[int, int], dict[int, int], float | None]:
    """Per-shard input bytes, each shard's largest file, and the measured rate, computed
    once per process (the rate for a job's walltime: a submission reads it at most once)."""
    sizes, largest = _sizes(run_dir)
    return sizes, largest, measured_rate(Location(output_uri, storage))


@cache
def _sizes(run_dir: str) -> tuple[dict[int, int], dict[int, int]]:
    """Per-shard input bytes and each shard's largest file, from the plan (fixed)."""
    table = plan.load(Path(run_dir))
    sizes: Counter[int] = Counter()
    largest: dict[int, int] = {}
    for shard, size in zip(table["shard"].to_pylist(), table["size"].to_pylist(), strict=True):
        sizes[shard] += size
        largest[shard] = max(largest.get(shard, 0), size)
    return dict(sizes), largest


#: What a file needs and when it was sampled, per output root (see RATE_REFRESH_S).
_floor_needs: dict[str, tuple[float, tuple[FileNeed, ...]]] = {}


def _needs(settings: Settings, now: float) -> tuple[FileNeed, ...]:
    """What one file needs per GPU kind, sampled again once stale."""
    at, needs = _floor_needs.get(settings.output_uri, (-math.inf, ()))
    if now - at >= RATE_REFRESH_S:
        needs = file_needs(sampled_stats(Location(settings.output_uri, settings.storage)))
        _floor_needs[settings.output_uri] = (now, needs)
    return needs


@dataclass(frozen=True)
class Floor:
    """The shortest limit a job of some shards may have and still finish one file
    (``minutes``; None: no file of the run has finished, so nothing says what a file
    needs), and what it was measured on (``basis``, in words)."""

    minutes: int | None
    basis: str


def one_file_minutes(
    settings: Settings,
    shards: Iterable[int],
    now: float | None = None,
    *,
    lead_s: int = SIGNAL_LEAD_S,
) -> Floor:
    """The shortest limit that still lets a job of these shards finish one file: a job's
    start-up and what a file of this run took (``run/throughput.py`` ``file_needs``: the
    p90 of the jobs' start-ups and of a file's time, or of its seconds per byte where time
    follows bytes, on the slowest GPU kind; sampled again every :data:`RATE_REFRESH_S`) for
    the largest file of these shards, plus the stop signal's lead (``lead_s``) and
    :data:`SIGNAL_EARLY_S`, in whole minutes; never at or below a limit at which a job the
    fit lowered was cut before its first file. Before any file finished it is unknown
    (``minutes`` None): no limit is lowered on a guess."""
    shards = list(shards)
    _, largest = _sizes(str(settings.run_dir))
    needs = _needs(settings, time.monotonic() if now is None else now)
    cut = failures.fit_floor(settings.run_dir, shards)
    if not needs:
        return Floor(None, "no file of this run has finished yet")
    size = max((largest.get(s, 0) for s in shards), default=0)
    slowest = max(needs, key=lambda n: n.of(size) + _startup(n))
    minutes = math.ceil((slowest.of(size) + _startup(slowest) + lead_s + SIGNAL_EARLY_S) / 60)
    basis = f"{slowest.said()}, {_started(slowest)}, {lead_s} s of the stop signal's lead"
    if cut > minutes:
        basis += f"; above {cut - 1} min, where a job the fit lowered was cut before its file"
    return Floor(max(minutes, cut), basis)


def _startup(need: FileNeed) -> float:
    """A job's start-up before its first file, as measured (or assumed before any was)."""
    return STARTUP_UNMEASURED_S if need.startup_s is None else need.startup_s


def _started(need: FileNeed) -> str:
    """The start-up's figure in words (the floor's basis)."""
    if need.startup_s is None:
        return f"{STARTUP_UNMEASURED_S} s of start-up (no job has recorded its own yet)"
    return f"{need.startup_s:.0f} s of start-up (p{NEED_PERCENTILE} of {need.jobs} job(s))"


def estimate(settings: Settings, shard: int, attempt: int = 1) -> Runtime:
    """The runtime estimate of one shard under ``settings``."""
    sizes, _, rate = _context(str(settings.run_dir), settings.output_uri, settings.storage)
    measured = rate is not None and rate > 0
    use = rate if measured else default_rate(settings.walltime)
    size = sizes.get(shard, 0)
    return Runtime(
        shard=shard,
        bytes=size,
        rate_bytes_per_s=use,
        measured=measured,
        minutes=minutes_for(size, use, settings.walltime, attempt),
    )


@cache
def _settings(config_json: str) -> Settings:
    """Validate a config once per process, not once per shard."""
    return Settings.from_config(json.loads(config_json))


def runtime_minutes_for(
    config: dict[str, Any], shard: int, attempt: int, *, main_process: bool, group: int = 1
) -> int:
    """The classify rule's ``runtime``: fixed from config, or estimated (top-level only);
    in the top-level process no more than the walltime adaptation's fit allows for a job
    of ``group`` shards (``run/adaptation``: SLURM's plan before a hidden window)."""
    settings = _settings(json.dumps(config, sort_keys=True, default=str))
    fixed = config["resources"]["classify"].get("runtime")
    if not fixed and not main_process:
        return settings.walltime.max_minutes
    # a retry doubles the walltime only after a stop at it (or a failure), never after a
    # cancel, a preemption or a cut the walltime fit caused (the failure records say which)
    factor = 1 + failures.longer_walltimes(settings.run_dir, shard, attempt) if main_process else 1
    minutes = int(fixed) * factor if fixed else estimate(settings, shard, factor).minutes
    if not main_process:
        return minutes
    # never a limit no file of this run can meet (each shard of a group runs its own files)
    minutes = max(minutes, one_file_minutes(settings, [shard]).minutes or 0)
    cap = adaptation.cap(settings.run_dir, datetime.now())  # at least the fit's floor in all
    return minutes if cap is None else min(minutes, max(1, cap // max(group, 1)))
