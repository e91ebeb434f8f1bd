"""Throughput: rates per GPU type, ETA arithmetic, walltime sizing."""

from __future__ import annotations

import math

import pytest
from synthrun import stats_for

from shardwise.ops.common.text import format_duration
from shardwise.run.throughput import eta, rate_for_walltime, summarize


def _stats(n: int = 10, **kw: object) -> list[dict]:
    return [stats_for(f"a/b/{i}.jsonl", 0, **kw) for i in range(n)]  # type: ignore[arg-type]


def test_summarize_per_device_and_overall() -> None:
    fast = _stats(10, docs=100, seconds=10.0, size=1000)
    slow = [
        stats_for(f"c/d/{i}.jsonl", 1, docs=100, seconds=20.0, size=1000, device="A100")
        for i in range(5)
    ]
    tp = summarize(fast + slow)
    assert [d.device_name for d in tp.devices] == ["NVIDIA H100 80GB HBM3", "A100"]
    h100, a100 = tp.devices
    assert h100.docs_per_s is not None and h100.docs_per_s.median == pytest.approx(10.0)
    assert a100.docs_per_s is not None and a100.docs_per_s.median == pytest.approx(5.0)
    assert h100.files_per_hour == pytest.approx(360.0)
    assert a100.files_per_hour == pytest.approx(180.0)
    assert tp.overall is not None
    assert tp.overall.files == 15
    # Aggregate: 15 files in 200 GPU-seconds.
    assert tp.overall.files_per_hour == pytest.approx(3600 * 15 / 200)
    assert tp.overall.bytes_per_s_total == pytest.approx(15_000 / 200)


def test_percentiles_are_over_files() -> None:
    rows = [stats_for(f"f{i}", 0, docs=i + 1, seconds=1.0) for i in range(101)]
    docs = summarize(rows).overall.docs_per_s  # type: ignore[union-attr]
    assert (docs.p10, docs.median, docs.p90) == pytest.approx((11.0, 51.0, 91.0))


def test_eta_arithmetic() -> None:
    tp = summarize(_stats(10, docs=100, seconds=10.0, size=1000))
    by_files = eta(50, tp, 2)
    assert by_files is not None
    assert by_files.seconds == pytest.approx(50 / (0.1 * 2))  # 0.1 file/s per GPU
    by_bytes = eta(10_000, tp, 4, unit="bytes")
    assert by_bytes is not None
    assert by_bytes.seconds == pytest.approx(10_000 / (100 * 4))  # 100 B/s per GPU
    assert by_bytes.rate_per_gpu == pytest.approx(100.0)
    with pytest.raises(ValueError, match="gpus"):
        eta(1, tp, 0)


def test_no_usable_stats() -> None:
    tp = summarize([{"file": "x", "seconds": 0}, {"file": "y"}])
    assert tp.overall is None and tp.devices == () and tp.files == 0
    assert eta(10, tp, 1) is None
    assert rate_for_walltime([]) is None


def test_rate_for_walltime_is_slow_side_p10() -> None:
    rows = [stats_for(f"f{i}", 0, size=1000 * (i + 1), seconds=1.0) for i in range(101)]
    assert rate_for_walltime(rows) == pytest.approx(11_000.0)


def test_format_duration() -> None:
    assert format_duration(42) == "42s"
    assert format_duration(720) == "12m"
    assert format_duration(5 * 3600 + 12 * 60) == "5h 12m"
    assert format_duration(3 * 86400 + 4 * 3600) == "3d 4h"
    assert format_duration(math.inf) == "unknown"
