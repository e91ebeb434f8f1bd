"""A shard job stopped by SIGTERM names what sent it, from SLURM's record of the job."""

from datetime import datetime, timedelta

import pytest

from shardwise.classify import stopcause
from shardwise.run import adaptation, failures

NOW = datetime(2026, 12, 6, 20, 0, 0)


def show_job(**over):
    """``scontrol show job`` fields of a running job with 40 min left of 60."""
    end = (NOW + timedelta(minutes=40)).isoformat(timespec="seconds")
    base = {"JobState": "RUNNING", "TimeLimit": "01:00:00", "EndTime": end,
            "PreemptTime": "None"}  # fmt: skip
    return {**base, **over}


def soon(seconds):
    return (NOW + timedelta(seconds=seconds)).isoformat(timespec="seconds")


def lowered(run_dir, job_id):
    event = adaptation.Event(at="t", action="lowered", text="lowered", minutes=9, jobs=(job_id,))
    adaptation.save(run_dir, adaptation.Adaptation(None, (event,)))


@pytest.mark.parametrize(
    ("fields", "labelled", "kind"),
    [
        ({"JobState": "CANCELLED"}, 3, "cancelled"),  # scancel by a user or an admin
        ({"EndTime": soon(110)}, 2, "walltime"),  # the profile's TERM@120
        ({"EndTime": soon(170)}, 0, "walltime"),  # SLURM's early signal; no fit lowered it
        ({"PreemptTime": soon(-1)}, 2, "preempted"),  # requeued (by SLURM, or by the job)
        ({}, 1, "interrupted"),  # 40 min left, still running: Ctrl-C of a local step, a kill
        ({"EndTime": "Unknown"}, 1, "interrupted"),
    ],
)
def test_each_stop_is_named_by_what_slurm_says(tmp_path, fields, labelled, kind):
    stop = stopcause.judge(show_job(**fields), tmp_path, "41", labelled, NOW)
    assert (stop.cause.kind, stop.limit) == (kind, 60)


def test_the_causes_say_what_the_retry_does(tmp_path):
    cancel = stopcause.judge(show_job(JobState="CANCELLED"), tmp_path, "41", 3, NOW)
    assert cancel.cause.reason == (
        "cancelled by a user or an admin (scancel; SLURM says CANCELLED); finished files stay "
        "done, and the retry keeps its walltime"
    )
    wall = stopcause.judge(show_job(EndTime=soon(100)), tmp_path, "41", 2, NOW)
    assert wall.cause.reason == (
        "stopped at its walltime (60 min) after 2 file(s) of this attempt; finished files stay "
        "done, and the retry asks for a longer walltime"
    )


def test_a_job_the_fit_lowered_and_cut_before_its_first_file_counts_against_the_fit(tmp_path):
    lowered(tmp_path, "41")
    cut = stopcause.judge(show_job(EndTime=soon(100), TimeLimit="9"), tmp_path, "41", 0, NOW)
    assert (cut.cause.kind, cut.limit) == ("fit_too_short", 9)
    assert "the fit's floor rises above it, and the retry keeps its walltime" in cut.cause.reason
    # after a file it is an ordinary walltime stop; another job was not lowered
    after = stopcause.judge(show_job(EndTime=soon(100)), tmp_path, "41", 1, NOW)
    other = stopcause.judge(show_job(EndTime=soon(100)), tmp_path, "42", 0, NOW)
    assert (after.cause.kind, other.cause.kind) == ("walltime", "walltime")


def test_outside_slurm_or_without_an_answer_the_stop_is_plain_interrupted(tmp_path):
    assert stopcause.why_stopped(tmp_path, 1, env={}) == stopcause.Stop(failures.INTERRUPTED)
