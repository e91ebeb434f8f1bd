"""Per-file stats -> rates per GPU, ETA, and the rate a SLURM walltime is sized on (pure).

Rates are per file and per GPU type (a mean over a run that mixes node types hides a slow
partition). Percentiles are over files: the p10 (slow side) sizes a walltime; an ETA needs
the aggregate (sum of work / sum of seconds): total time is a sum, not a median.
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Self

import numpy as np

from shardwise.run.reader import QUALITY_COUNTS

#: ``device_name`` used when a stats file has none (CPU runs, old stats).
UNKNOWN_DEVICE = "unknown"


def parse_time(value: object) -> float:
    """ISO 8601 -> POSIX seconds (naive means UTC); NaN when absent or unreadable: one
    malformed stats file must not hide the report."""
    if not isinstance(value, str) or not value:
        return math.nan
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return math.nan
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass(frozen=True, eq=False)
class StatsTable:
    """Stats as columns (one row per file), so every rate is a numpy expression; missing
    numbers are NaN; ``bytes`` is the input file's size."""

    file: np.ndarray  # object (str)
    shard: np.ndarray  # int64, -1 when unknown
    device_name: np.ndarray  # object (str)
    docs: np.ndarray  # float64
    tokens: np.ndarray  # float64
    seconds: np.ndarray  # float64
    bytes: np.ndarray  # float64
    finished_at: np.ndarray  # float64, POSIX seconds
    quality: np.ndarray  # float64 (files x QUALITY): data-quality counts, NaN when absent
    #: object: each file's ``fidelity`` entries (a list of dicts; empty when absent)
    fidelity: np.ndarray

    def __len__(self) -> int:
        return int(self.file.size)

    def select(self, mask: np.ndarray) -> Self:
        """The rows where ``mask`` is true."""
        return StatsTable(**{name: getattr(self, name)[mask] for name in _COLUMNS})

    def with_bytes(self, sizes: np.ndarray) -> Self:
        """A copy whose missing ``bytes`` are taken from ``sizes`` (e.g. the plan's)."""
        filled = np.where(np.isnan(self.bytes), sizes, self.bytes)
        return StatsTable(**{**{n: getattr(self, n) for n in _COLUMNS}, "bytes": filled})


_COLUMNS = ("file", "shard", "device_name", "docs", "tokens", "seconds", "bytes", "finished_at",
            "quality", "fidelity")  # fmt: skip
#: The columns of ``StatsTable.quality``: the reader's counts, then ``truncated_docs``.
QUALITY = (*QUALITY_COUNTS, "truncated_docs")


def _quality_row(row: dict[str, Any]) -> list[float]:
    counts = row.get("counts") if isinstance(row.get("counts"), dict) else {}
    return [number(counts.get(k)) for k in QUALITY_COUNTS] + [number(row.get("truncated_docs"))]


def concat(*tables: StatsTable) -> StatsTable:
    """The rows of several tables; a file in more than one keeps its latest row."""
    columns = {n: np.concatenate([getattr(t, n) for t in tables]) for n in _COLUMNS}
    return latest_per_file(StatsTable(**columns))


def number(value: Any) -> float:
    """A finite float, or NaN for anything else (bools, strings, None)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def stats_table(stats: Iterable[dict[str, Any]] | StatsTable) -> StatsTable:
    """Columnar view of stats dicts; a file seen twice (a listing that caught a rewrite,
    merged roots) keeps its latest ``finished_at``: both would double the docs."""
    if isinstance(stats, StatsTable):
        return stats
    rows = list(stats)
    shard = [row.get("shard") for row in rows]

    def floats(key: str) -> np.ndarray:
        return np.array([number(row.get(key)) for row in rows], dtype=np.float64)

    quality = np.array([_quality_row(row) for row in rows], np.float64)
    table = StatsTable(
        file=np.array([str(row.get("file") or "") for row in rows], dtype=object),
        shard=np.array([s if isinstance(s, int) and not isinstance(s, bool) else -1 for s in shard],
                       dtype=np.int64),
        device_name=np.array([str(row.get("device_name") or UNKNOWN_DEVICE) for row in rows],
                             dtype=object),
        docs=floats("docs"), tokens=floats("tokens"), seconds=floats("seconds"),
        bytes=floats("bytes"),
        finished_at=np.array([parse_time(row.get("finished_at")) for row in rows], np.float64),
        quality=quality.reshape(len(rows), len(QUALITY)),
        fidelity=objects([_fidelity_of(row) for row in rows]),
    )  # fmt: skip
    return latest_per_file(table)


def objects(values: list[Any]) -> np.ndarray:
    """A 1-d object array of ``values`` (numpy would make a list of lists 2-d)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _fidelity_of(row: dict[str, Any]) -> list[dict[str, Any]]:
    value = row.get("fidelity")
    return [f for f in value if isinstance(f, dict)] if isinstance(value, list) else []


def quality_totals(stats: StatsTable, mask: np.ndarray | None = None) -> dict[str, int]:
    """Sums of the data-quality counts over ``stats`` (rows in ``mask``), zeros left out."""
    matrix = stats.quality if mask is None else stats.quality[mask]
    sums = np.nansum(matrix, axis=0) if matrix.size else np.zeros(len(QUALITY))
    return {k: int(v) for k, v in zip(QUALITY, sums, strict=True) if v}


def latest_per_file(t: StatsTable) -> StatsTable:
    """Keep one row per non-empty ``file``, the one with the latest ``finished_at``."""
    named = t.file != ""
    if np.unique(t.file[named]).size == int(named.sum()):
        return t
    when = np.where(np.isnan(t.finished_at), -np.inf, t.finished_at)
    order = np.lexsort((when, t.file.astype(str)))
    files = t.file[order]
    last = np.ones(order.size, dtype=bool)
    last[:-1] = files[1:] != files[:-1]
    keep = np.zeros(order.size, dtype=bool)
    keep[order[last]] = True
    return t.select(keep | ~named)


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


@dataclass(frozen=True)
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
        name, len(t), seconds, Percentiles.of(_ratio(t.docs, t.seconds)),
        Percentiles.of(_ratio(t.tokens, t.seconds)), Percentiles.of(_ratio(t.bytes, t.seconds)),
        files_per_hour=3600.0 * len(t) / seconds if seconds > 0 else math.nan,
        docs_per_s_total=float(np.nansum(t.docs)) / seconds if seconds > 0 else math.nan,
        bytes_per_s_total=bytes_total,
    )  # fmt: skip


def _timed(stats: Iterable[dict[str, Any]] | StatsTable) -> StatsTable:
    """Rows usable for rates: positive, finite seconds."""
    t = stats_table(stats)
    return t.select(np.isfinite(t.seconds) & (t.seconds > 0))


def summarize(stats: Iterable[dict[str, Any]] | StatsTable) -> Throughput:
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


@dataclass(frozen=True)
class Eta:
    """Time to finish ``remaining`` units on ``gpus`` GPUs at the aggregate rate."""

    seconds: float
    remaining: float
    unit: Literal["files", "bytes"]
    gpus: int
    rate_per_gpu: float  # units per second per GPU
    #: What runs in parallel: "GPU" (cluster jobs, one GPU each) or "local job".
    per: str = "GPU"


def eta(
    remaining: float, throughput: Throughput, gpus: int, *,
    unit: Literal["files", "bytes"] = "files", per: str = "GPU",
) -> Eta | None:  # fmt: skip
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
    return Eta(float(remaining) / (rate * gpus), float(remaining), unit, gpus, float(rate), per)


def rate_for_walltime(stats: Iterable[dict[str, Any]] | StatsTable) -> float | None:
    """Input bytes per second per GPU at the slow end (p10 over files; the median would
    kill every shard on a slow node or of long documents); None if unknown."""
    t = _timed(stats)
    rates = Percentiles.of(_ratio(t.bytes, t.seconds))
    return rates.p10 if rates and rates.p10 > 0 else None
