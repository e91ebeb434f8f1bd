"""``shardwise cluster retime``: lower the run's queued jobs' limits, decrease only."""

import pytest
from slurm_samples import job

from shardwise.errors import ConfigError
from shardwise.ops.cluster import retime
from shardwise.slurm.queries import Answer


def run_jobs():
    return {
        "11": (job("11", "PENDING", time_limit_minutes=720), (0, 1, 2)),
        "9": (job("9", "PENDING", time_limit_minutes=240), (3,)),
        "12": (job("12", "PENDING", time_limit_minutes=20), (4,)),  # already short
        "8": (job("8", "RUNNING", time_limit_minutes=720), (5, 6, 7)),  # not queued
    }


def test_only_queued_jobs_over_the_limit_are_lowered_each_printed():
    planned = retime.changes(run_jobs(), 120)
    assert [(c.job_id, c.minutes, c.new_minutes) for c in planned] == [
        ("9", 240, 120), ("11", 720, 120)]  # fmt: skip
    asked = []

    def lower(job_id, minutes):
        asked.append((job_id, minutes))
        return Answer(True) if job_id == "9" else Answer(None, "Access/permission denied", "failed")

    lines = [o.line() for o in retime.apply(planned, lower, dry_run=False)]
    assert asked == [("9", 120), ("11", 120)]
    assert lines == [
        "lowered job 9 (shards 3): 240 -> 120 min",
        "could not lower job 11 (shards 0-2): 720 -> 120 min: Access/permission denied",
    ]


def test_a_dry_run_changes_nothing_and_the_advice_names_the_config_change():
    planned = retime.changes(run_jobs(), 120)
    lines = [
        o.line() for o in retime.apply(planned, lambda *_: pytest.fail("called"), dry_run=True)
    ]
    assert lines[0] == "would lower job 9 (shards 3): 240 -> 120 min"
    config, cut_short, later = retime.advice(planned, 120)
    assert config.startswith("next submissions: set walltime.max_minutes: 40 in the config")
    assert "resumes on its retry" in cut_short
    assert "run `shardwise cluster status` again" in later  # jobs that start later


def test_a_limit_below_one_minute_is_refused():
    with pytest.raises(ConfigError, match="--max-minutes must be >= 1"):
        retime.changes(run_jobs(), 0)


def test_hundreds_of_queued_jobs_of_several_shards_are_each_lowered_once():
    jobs = {
        str(i): (job(str(i), "PENDING", time_limit_minutes=960), (4 * i, 4 * i + 1, 4 * i + 2))
        for i in range(1, 397)  # the original campaign's 396 queued jobs, 3 shards each
    }
    planned = retime.changes(jobs, 68)
    assert [c.job_id for c in planned] == [str(i) for i in range(1, 397)]  # numeric order
    asked = []
    outcomes = retime.apply(
        planned, lambda j, m: asked.append((j, m)) or Answer(True), dry_run=False
    )
    lines = [o.line() for o in outcomes]
    assert asked == [(str(i), 68) for i in range(1, 397)]
    assert lines[-1] == "lowered job 396 (shards 1584-1586): 960 -> 68 min"
    config, _, _ = retime.advice(planned, 68)
    assert "walltime.max_minutes: 22 in the config (a job of 3 shard(s)" in config
