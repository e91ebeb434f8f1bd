"""A shard's SLURM runtime: its input bytes at the measured (or configured) speed, clamped."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from inproc import label, plan_run

from shardwise.config import Settings, WalltimeSettings, validate
from shardwise.planner import walltime
from shardwise.run import adaptation, failures, plan
from shardwise.store.location import Location

WALLTIME = WalltimeSettings(
    default_mb_per_minute=50, safety_factor=2, min_minutes=10, max_minutes=240
)


@pytest.mark.parametrize(
    ("size", "attempt", "minutes"),
    [
        (0, 1, 10),  # clamped up to min_minutes
        (1_000_000_000, 1, 40),  # 1 GB at 50 MB/min = 20 min, x2 safety
        (1_000_000_000, 2, 80),  # a retry after a walltime kill asks for twice as long
        (10_000_000_000, 1, 240),  # clamped down to max_minutes
    ],
)
def test_minutes_are_size_over_rate_times_safety_times_attempt_clamped(size, attempt, minutes):
    rate = walltime.default_rate(WALLTIME)
    assert rate == pytest.approx(50e6 / 60)
    assert walltime.minutes_for(size, rate, WALLTIME, attempt) == minutes


def test_the_measured_rate_is_the_slow_end_of_the_stats(tmp_path):
    output = Location(str(tmp_path))
    assert walltime.measured_rate(output) is None  # nothing labelled yet
    for i, seconds in enumerate([1.0, 2.0, 4.0, 8.0, 16.0]):
        body = {"file": f"f{i}", "bytes": 8_000_000, "seconds": seconds}
        (tmp_path / f"f{i}.stats.json").write_text(json.dumps(body))
    (tmp_path / "broken.stats.json").write_text("{not json")  # skipped, not fatal
    rate = walltime.measured_rate(output)
    assert 0.5e6 < rate < 1e6  # p10 of 0.5, 1, 2, 4, 8 MB/s: near the slowest file


def test_a_planned_shard_is_estimated_from_its_files_and_explained(tmp_path):
    cfg = plan_run(tmp_path, total_shards=3)
    settings = Settings.from_config(cfg)
    table = plan.load(settings.run_dir)
    shard = int(table["shard"][0].as_py())
    size = sum(s for s, h in zip(table["size"].to_pylist(), table["shard"].to_pylist(), strict=True)
               if h == shard)  # fmt: skip
    runtime = walltime.estimate(settings, shard)
    assert (runtime.shard, runtime.bytes, runtime.measured) == (shard, size, False)
    assert runtime.minutes == settings.walltime.min_minutes  # kilobytes: the floor
    assert runtime.explain().startswith(f"shard {shard}: ") and "configured default" in (
        runtime.explain()
    )


def test_the_rule_runtime_is_fixed_when_configured_and_the_ceiling_inside_a_job(tmp_path):
    cfg = validate(plan_run(tmp_path, total_shards=3))  # defaults filled, as Snakemake does
    label(tmp_path / "run")
    fixed = {**cfg, "resources": {"classify": {**cfg["resources"]["classify"], "runtime": 30}}}
    run_dir = Settings.from_config(fixed).run_dir
    failures.record_failure(run_dir, 0, [], cause=failures.cancelled("CANCELLED"), limit=30)
    assert walltime.runtime_minutes_for(fixed, 0, 2, main_process=True) == 30  # a scancel
    failures.record_failure(run_dir, 0, [], cause=failures.walltime_stop(30, 1), limit=30)
    assert walltime.runtime_minutes_for(fixed, 0, 2, main_process=True) == 60  # the walltime
    free = {**cfg, "resources": {"classify": {**cfg["resources"]["classify"], "runtime": None}}}
    settings = Settings.from_config(free)
    # a cluster job never estimates (no listing, no stats): it asks for the ceiling
    assert walltime.runtime_minutes_for(free, 0, 1, main_process=False) == (
        settings.walltime.max_minutes
    )
    assert walltime.runtime_minutes_for(free, 0, 1, main_process=True) >= (
        settings.walltime.min_minutes
    )


def test_the_adaptations_fit_caps_the_next_submissions_a_group_sharing_it(tmp_path):
    """SLURM's plan starts 20 min now: a shard asks for at most 20, each of a group of 4
    for 5 (the group's sum); once not even one file fits, the configured limit again."""
    cfg = validate(plan_run(tmp_path, total_shards=3))
    fixed = {**cfg, "resources": {"classify": {**cfg["resources"]["classify"], "runtime": 960}}}
    run_dir = Settings.from_config(fixed).run_dir
    assert walltime.runtime_minutes_for(fixed, 0, 1, main_process=True) == 960
    now = datetime.now()
    horizon = (now + timedelta(minutes=20, seconds=30)).isoformat(timespec="seconds")
    fit = adaptation.Fit(
        horizon=horizon, minutes=20, floor=3, since=now.isoformat(timespec="seconds"), reason="plan"
    )
    adaptation.save(run_dir, adaptation.Adaptation(fit))
    assert walltime.runtime_minutes_for(fixed, 0, 1, main_process=True) == 20
    assert walltime.runtime_minutes_for(fixed, 0, 1, main_process=True, group=4) == 5
    assert walltime.runtime_minutes_for(fixed, 0, 1, main_process=False) == 960  # inside a job
    near = (now + timedelta(minutes=2)).isoformat()  # 2 min left: below one file's 3
    past = adaptation.Fit(horizon=near, minutes=20, floor=3, since="", reason="plan")
    adaptation.save(run_dir, adaptation.Adaptation(past))
    assert walltime.runtime_minutes_for(fixed, 0, 1, main_process=True) == 960


def _finished(
    output: str, rows: list[tuple[str, int, float]], startups: tuple[float, ...] = ()
) -> None:
    """Stats of finished files: (GPU kind, bytes, seconds) each; the first files are
    their jobs' first, with ``startups`` (``startup_s``)."""
    for i, (device, size, seconds) in enumerate(rows):
        body = {"file": f"x{i}", "bytes": size, "seconds": seconds, "device_name": device}
        if i < len(startups):
            body["startup_s"] = startups[i]
        (Path(output) / f"x{i}.stats.json").write_text(json.dumps(body))


def test_before_any_finished_file_what_a_file_needs_is_unknown(tmp_path):
    """No guess: the configured rate's estimate cut jobs before their first file."""
    cfg = plan_run(tmp_path, total_shards=3)
    settings = Settings.from_config(cfg)
    walltime._floor_needs.clear()
    floor = walltime.one_file_minutes(settings, [0, 1, 2], now=0.0)
    assert floor == walltime.Floor(None, "no file of this run has finished yet")
    walltime._floor_needs.clear()


def test_a_files_need_is_its_measured_time_where_time_does_not_follow_bytes(tmp_path):
    """Files of 39 and 72 kB taking 282 and 286 s (a loaded host): the p90 of a file's
    time, not bytes x the slowest rate x 2; refreshed once stale; never at or below a
    limit at which a job the fit lowered was cut before its first file."""
    cfg = plan_run(tmp_path, total_shards=3)
    settings = Settings.from_config(cfg)
    walltime._floor_needs.clear()
    assert walltime.one_file_minutes(settings, [0], now=0.0).minutes is None
    times = [282, 286, 250, 394, 300, 290, 260]
    startups = (40.0, 45.0, 50.0)  # three jobs' start-ups, on their first files
    _finished(settings.output_uri, [("H100", 39_000 + 5_000 * (i % 3) * 3, t)
                                    for i, t in enumerate(times)], startups)  # fmt: skip
    assert walltime.one_file_minutes(settings, [0], now=10.0).minutes is None  # not yet stale
    floor = walltime.one_file_minutes(settings, [0], now=walltime.RATE_REFRESH_S + 1)
    p90, start = float(np.percentile(times, 90)), float(np.percentile(startups, 90))  # 338, 49
    lead = walltime.SIGNAL_LEAD_S + walltime.SIGNAL_EARLY_S
    assert floor.minutes == math.ceil((p90 + start + lead) / 60) == 10
    assert floor.basis.startswith("p90 of 7 finished file(s)' time, 338 s (a file's time does")
    assert "49 s of start-up (p90 of 3 job(s)), 120 s of the stop signal's lead" in floor.basis
    # what a one-file job needs at most here: its start-up, the longest file, the lead
    need = max(startups) + max(times) + walltime.SIGNAL_LEAD_S
    assert floor.minutes * 60 <= 1.5 * need
    later = walltime.one_file_minutes(settings, [0], now=walltime.RATE_REFRESH_S + 1, lead_s=300)
    assert later.minutes == math.ceil((p90 + start + 300 + walltime.SIGNAL_EARLY_S) / 60) == 13
    failures.record_failure(settings.run_dir, 0, [], cause=failures.fit_too_short(20), limit=20)
    cut = walltime.one_file_minutes(settings, [0], now=walltime.RATE_REFRESH_S + 2)
    assert cut.minutes == 21 and "where a job the fit lowered was cut" in cut.basis
    walltime._floor_needs.clear()


def test_where_time_follows_bytes_a_jobs_floor_is_its_own_largest_file(tmp_path):
    cfg = plan_run(tmp_path, total_shards=3)
    settings = Settings.from_config(cfg)
    walltime._floor_needs.clear()
    # 1 s per kB on one kind, 3 s per kB on another (the slowest kind sizes the floor)
    rows = [("H100", kb * 1000, kb * 1.0) for kb in (100, 200, 300, 400, 500)]
    rows += [("V100", kb * 1000, kb * 3.0) for kb in (100, 200, 300, 400, 500)]
    _finished(settings.output_uri, rows)
    table = plan.load(settings.run_dir)
    sizes = zip(table["shard"].to_pylist(), table["size"].to_pylist(), strict=True)
    largest = max(size for shard, size in sizes if shard == 0)
    floor = walltime.one_file_minutes(settings, [0], now=0.0)
    unmeasured = walltime.STARTUP_UNMEASURED_S + walltime.SIGNAL_LEAD_S + walltime.SIGNAL_EARLY_S
    assert floor.minutes == math.ceil((largest * 3 / 1000 + unmeasured) / 60)
    assert "seconds per byte (a file's time follows its bytes here)" in floor.basis
    assert "60 s of start-up (no job has recorded its own yet)" in floor.basis
    walltime._floor_needs.clear()
