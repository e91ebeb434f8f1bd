"""Per-file stats -> rates per GPU, ETA, and the rate a SLURM walltime is sized on (pure).

Rates are per file and per GPU type (a mean over a run that mixes node types hides a slow
partition). Percentiles are over files: the p10 (slow side) sizes a walltime; an ETA needs
the aggregate (sum of work / sum of seconds): total time is a sum, not a median.
"""

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Self

import numpy as np

from shardwise.run import statstable
from shardwise.run.statstable import StatsTable


@dataclass(frozen=True)
class Percentiles:
    """p10 / median / p90 over files (p10 is the slow side for a rate)."""

    p10: float
    median: float
    p90: float

    @classmethod
    def of(cls, values: np.ndarray) -> Self | None:
        """Percentiles of the finite values; None when there are none."""
        finite = values[np.isfinite(values)]
        if finite.size == 0:
            return None
        p10, p50, p90 = np.percentile(finite, [10, 50, 90])
        return cls(float(p10), float(p50), float(p90))


@dataclass(frozen=True, kw_only=True)
class DeviceRate:
    """Throughput of one GPU type (or of all, ``device_name == "all"``), per GPU."""

    device_name: str
    files: int
    seconds: float  # GPU-seconds spent on these files
    docs_per_s: Percentiles | None  # over files
    tokens_per_s: Percentiles | None
    bytes_per_s: Percentiles | None
    files_per_hour: float  # aggregate: files / GPU-hour
    docs_per_s_total: float  # aggregate: sum docs / sum seconds
    bytes_per_s_total: float | None  # aggregate; None without sizes


@dataclass(frozen=True)
class Throughput:
    """Rates per GPU type (most files first) and over all files."""

    devices: tuple[DeviceRate, ...]
    overall: DeviceRate | None  # None when no stats have positive seconds

    @property
    def files(self) -> int:
        """How many files the rates are based on."""
        return self.overall.files if self.overall else 0


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Element-wise num/den, NaN where den is not positive."""
    out = np.full(num.shape, np.nan)
    ok = den > 0
    np.divide(num, den, out=out, where=ok)
    return out


def _device_rate(name: str, t: StatsTable) -> DeviceRate:
    seconds = float(np.nansum(t.seconds))
    sized = np.isfinite(t.bytes)
    sized_s = t.seconds[sized].sum()
    bytes_total = float(t.bytes[sized].sum() / sized_s) if sized.any() and sized_s > 0 else None
    return DeviceRate(
        device_name=name,
        files=len(t),
        seconds=seconds,
        docs_per_s=Percentiles.of(_ratio(t.docs, t.seconds)),
        tokens_per_s=Percentiles.of(_ratio(t.tokens, t.seconds)),
        bytes_per_s=Percentiles.of(_ratio(t.bytes, t.seconds)),
        files_per_hour=3600.0 * len(t) / seconds if seconds > 0 else math.nan,
        docs_per_s_total=float(np.nansum(t.docs)) / seconds if seconds > 0 else math.nan,
        bytes_per_s_total=bytes_total,
    )


def _timed(stats: Iterable[Mapping[str, Any]] | StatsTable) -> StatsTable:
    """Rows usable for rates: positive, finite seconds."""
    t = stats if isinstance(stats, StatsTable) else statstable.from_rows(stats)
    return t.select(np.isfinite(t.seconds) & (t.seconds > 0))


def summarize(stats: Iterable[Mapping[str, Any]] | StatsTable) -> Throughput:
    """Rates per GPU type and overall, from each file's docs, tokens and seconds (not its
    stored ``docs_per_s``: the aggregate uses the raw fields too, so they never disagree)."""
    t = _timed(stats)
    if len(t) == 0:
        return Throughput(devices=(), overall=None)
    devices = t.device_name.astype(str)
    names, inverse, counts = np.unique(devices, return_inverse=True, return_counts=True)
    order = sorted(range(names.size), key=lambda i: (-counts[i], names[i]))
    devices = tuple(_device_rate(str(names[i]), t.select(inverse == i)) for i in order)
    return Throughput(devices=devices, overall=_device_rate("all", t))


@dataclass(frozen=True, kw_only=True)
class Eta:
    """Time to finish ``remaining`` units on ``gpus`` GPUs at a measured rate: the pace of
    whole shard jobs (``basis`` "shard jobs": start-up and model loading included), or,
    before any shard job finished, the labelling rate alone (``basis`` "labelling")."""

    seconds: float
    remaining: float
    unit: Literal["files", "bytes"]
    gpus: int
    rate_per_gpu: float  # units per second per GPU
    #: What runs in parallel: "GPU" (cluster jobs, one GPU each) or "local job".
    per: str = "GPU"
    basis: Literal["shard jobs", "labelling"] = "labelling"
    jobs: int = 0  # the finished shard jobs the pace rests on
    seconds_per_job: float | None = None  # their mean wall seconds
    labelling_seconds: float | None = None  # the labelling-only ETA, beside the paced one


def paced(
    labelling: Eta | None,
    remaining_bytes: float,
    job_seconds: Iterable[float],
    job_bytes: Iterable[float],
    gpus: int,
    per: str,
) -> Eta | None:
    """The ETA at the pace of finished shard jobs (wall seconds per input byte, summed over
    them): the labelling-only ``labelling`` ETA when none finished (or they read nothing)."""
    seconds, nbytes = np.asarray(list(job_seconds), float), np.asarray(list(job_bytes), float)
    if seconds.size == 0 or not nbytes.sum() > 0 or not seconds.sum() > 0:
        return labelling
    rate = float(nbytes.sum() / seconds.sum())  # bytes per second per job, all included
    return Eta(
        seconds=float(remaining_bytes) / (rate * gpus),
        remaining=float(remaining_bytes),
        unit="bytes",
        gpus=gpus,
        rate_per_gpu=rate,
        per=per,
        basis="shard jobs",
        jobs=int(seconds.size),
        seconds_per_job=float(seconds.mean()),
        labelling_seconds=labelling.seconds if labelling is not None else None,
    )


def eta(
    remaining: float,
    throughput: Throughput,
    gpus: int,
    *,
    unit: Literal["files", "bytes"] = "files",
    per: str = "GPU",
) -> Eta | None:
    """ETA = remaining / (aggregate rate per GPU x gpus); None without a usable rate. Bytes
    are the better unit (files vary 100x in a crawl); start-up per shard is not counted."""
    if gpus <= 0:
        raise ValueError(f"gpus must be positive, got {gpus}")
    overall = throughput.overall
    if overall is None:
        return None
    rate = overall.files_per_hour / 3600.0 if unit == "files" else overall.bytes_per_s_total
    if rate is None or not rate > 0:
        return None
    return Eta(
        seconds=float(remaining) / (rate * gpus),
        remaining=float(remaining),
        unit=unit,
        gpus=gpus,
        rate_per_gpu=float(rate),
        per=per,
    )


def rate_for_walltime(
    stats: Iterable[Mapping[str, Any]] | StatsTable, *, per_kind: bool = False
) -> float | None:
    """Input bytes per second per GPU at the slow end (p10 over files; the median would
    kill every shard on a slow node or of long documents); None if unknown. ``per_kind``:
    the lowest of each GPU kind's p10 (a kind with few files is not drowned by a fast one)."""
    t = _timed(stats)
    groups = [t]
    if per_kind and len(t):
        kinds = t.device_name.astype(str)
        groups = [t.select(kinds == k) for k in np.unique(kinds)]
    found = [r.p10 for g in groups if (r := Percentiles.of(_ratio(g.bytes, g.seconds)))]
    slowest = min((p for p in found if p > 0), default=None)
    return slowest


#: Finished files needed before their times say whether a file's time follows its bytes.
NEED_MIN_FILES = 5
#: The correlation of bytes and seconds over finished files at which time follows bytes.
FOLLOWS_BYTES = 0.8
#: The percentile of a file's time (or seconds per byte) a job's floor is sized on.
NEED_PERCENTILE = 90


@dataclass(frozen=True)
class FileNeed:
    """What one file of this run takes, measured on finished files: ``seconds`` per file
    (the ``NEED_PERCENTILE``-th), or ``seconds_per_byte`` (its percentile) where a file's
    time follows its bytes; ``basis`` says which (``files`` or ``bytes``). ``startup_s``:
    a job's start-up before its first file (the same percentile over the jobs' first
    files, ``FileStats.startup_s``; None before any job recorded it); ``jobs`` how many."""

    basis: Literal["files", "bytes"]
    files: int
    seconds: float
    seconds_per_byte: float = 0.0
    startup_s: float | None = None
    jobs: int = 0

    def of(self, largest_bytes: int) -> float:
        """Seconds one file of a job whose largest file has ``largest_bytes`` needs."""
        return self.seconds_per_byte * largest_bytes if self.basis == "bytes" else self.seconds

    def said(self) -> str:
        """The basis in words (the fit's line)."""
        over = f"p{NEED_PERCENTILE} of {self.files} finished file(s)"
        if self.basis == "bytes":
            return f"{over}' seconds per byte (a file's time follows its bytes here)"
        return f"{over}' time, {self.seconds:.0f} s (a file's time does not follow its bytes here)"


def file_need(stats: Iterable[Mapping[str, Any]] | StatsTable) -> FileNeed | None:
    """What one file needs, from the run's finished files (None before any): seconds per
    file, or per byte where enough files show their time following their bytes (a
    correlation of at least :data:`FOLLOWS_BYTES` over :data:`NEED_MIN_FILES` or more)."""
    t = _timed(stats)
    if len(t) == 0:
        return None
    seconds = float(np.percentile(t.seconds, NEED_PERCENTILE))
    startups = t.column("startup_s")
    startups = startups[np.isfinite(startups) & (startups >= 0)]
    startup = float(np.percentile(startups, NEED_PERCENTILE)) if startups.size else None
    need = FileNeed("files", len(t), seconds, startup_s=startup, jobs=int(startups.size))
    sized = np.isfinite(t.bytes) & (t.bytes > 0)
    if sized.sum() >= NEED_MIN_FILES:
        b, s = t.bytes[sized], t.seconds[sized]
        follows = float(np.std(b)) > 0 and float(np.std(s)) > 0
        if follows and float(np.corrcoef(b, s)[0, 1]) >= FOLLOWS_BYTES:
            per_byte = float(np.percentile(s / b, NEED_PERCENTILE))
            return dataclasses.replace(need, basis="bytes", seconds_per_byte=per_byte)
    return need


def file_needs(stats: Iterable[Mapping[str, Any]] | StatsTable) -> tuple[FileNeed, ...]:
    """:func:`file_need` per GPU kind (a job may start on any kind its partitions hold, and
    a kind with few files is not drowned by a fast one); none before any file finished."""
    t = _timed(stats)
    if len(t) == 0:
        return ()
    kinds = t.device_name.astype(str)
    found = (file_need(t.select(kinds == k)) for k in np.unique(kinds))
    return tuple(n for n in found if n is not None)
