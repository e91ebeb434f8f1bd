"""Walltime of a classify job, from the shard's input size and the measured speed.

``minutes = size / rate * safety_factor * attempt``, clamped to ``[min_minutes,
max_minutes]``; the rate is the p10 of input bytes per second over the run's stats, or
``default_mb_per_minute`` before any. Short, honest walltimes get jobs backfilled and
started before maintenance windows; a group of K shards asks for the sum.
"""

import json
import math
import random
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from shardwise.config import Settings
from shardwise.run import outputs, plan
from shardwise.run.throughput import rate_for_walltime
from shardwise.store.location import Location

#: Stats files sampled to estimate the rate (enough for a stable p10, cheap to read).
RATE_SAMPLE = 400


@dataclass(frozen=True)
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
    size_bytes: int, rate_bytes_per_s: float, walltime: dict[str, Any], attempt: int = 1
) -> int:
    """The clamped runtime in whole minutes for ``size_bytes`` of input."""
    raw = size_bytes / rate_bytes_per_s / 60 * walltime["safety_factor"] * max(attempt, 1)
    return int(min(max(math.ceil(raw), walltime["min_minutes"]), walltime["max_minutes"]))


def default_rate(walltime: dict[str, Any]) -> float:
    """Bytes per second from the configured MB per minute."""
    return walltime["default_mb_per_minute"] * 1e6 / 60


def measured_rate(output: Location, sample: int = RATE_SAMPLE, seed: int = 0) -> float | None:
    """p10 of input bytes per second over a sample of the run's stats files."""
    names = sorted(outputs.scan(output.list_names()).of(outputs.STATS))
    if not names:
        return None
    random.Random(seed).shuffle(names)
    stats = []
    for rel in names[:sample]:
        where = outputs.STATS.rel(rel)
        try:
            stats.append(outputs.STATS.parse(output.read_bytes(where), output.url(where)).figures())
        except (FileNotFoundError, ValueError):
            continue  # one unreadable stats file must not stop the planning
    return rate_for_walltime(stats)


@cache
def _context(run_dir: str, output_uri: str, storage: Any) -> tuple[dict[int, int], float | None]:
    """Per-shard input bytes and the measured rate, computed once per process."""
    table = plan.load(Path(run_dir))
    sizes: Counter[int] = Counter()
    for shard, size in zip(table["shard"].to_pylist(), table["size"].to_pylist(), strict=True):
        sizes[shard] += size
    return dict(sizes), measured_rate(Location(output_uri, storage))


def estimate(settings: Settings, shard: int, attempt: int = 1) -> Runtime:
    """The runtime estimate of one shard under ``settings``."""
    sizes, rate = _context(str(settings.run_dir), settings.output_uri, settings.storage)
    measured = rate is not None and rate > 0
    use = rate if measured else default_rate(settings.walltime)
    size = sizes.get(shard, 0)
    return Runtime(shard, size, use, measured, minutes_for(size, use, settings.walltime, attempt))


@cache
def _settings(config_json: str) -> Settings:
    """Validate a config once per process, not once per shard."""
    return Settings.from_config(json.loads(config_json))


def runtime_minutes_for(
    config: dict[str, Any], shard: int, attempt: int, *, main_process: bool
) -> int:
    """The classify rule's ``runtime``: fixed from config, or estimated (top-level only)."""
    fixed = config["resources"]["classify"].get("runtime")
    if fixed:
        return int(fixed) * max(attempt, 1)
    settings = _settings(json.dumps(config, sort_keys=True, default=str))
    if not main_process:
        return settings.walltime["max_minutes"]
    return estimate(settings, shard, attempt).minutes
