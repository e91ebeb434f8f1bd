"""A shard job stopped by SIGTERM names what sent it, from SLURM's record of the job."""

from datetime import datetime, timedelta

import pytest

from shardwise.classify import stopcause
from shardwise.run import adaptation, failures

NOW = datetime(2026, 12, 6, 20, 0, 0)


def show_job(left_s=2400, **over):
    """``scontrol show job`` fields of a running job of 60 min with ``left_s`` seconds left
    (its EndTime is the scheduled end, StartTime + TimeLimit)."""
    end = NOW + timedelta(seconds=left_s)
    base = {"JobState": "RUNNING", "TimeLimit": "01:00:00", "PreemptTime": "None",
            "StartTime": (end - timedelta(minutes=60)).isoformat(timespec="seconds"),
            "EndTime": end.isoformat(timespec="seconds")}  # fmt: skip
    return {**base, **over}


#: What SLURM says of a job a user cancels, seen on the test cluster at the SIGTERM: the
#: end brought forward to the moment of the cancel, 2 s after the job started.
CANCELLED = {"JobState": "COMPLETING", "StartTime": "2026-12-06T19:59:58",
             "EndTime": "2026-12-06T20:00:00"}  # fmt: skip


def soon(seconds):
    return (NOW + timedelta(seconds=seconds)).isoformat(timespec="seconds")


def lowered(run_dir, job_id):
    event = adaptation.Event(at="t", action="lowered", text="lowered", minutes=9, jobs=(job_id,))
    adaptation.save(run_dir, adaptation.Adaptation(None, (event,)))


@pytest.mark.parametrize(
    ("left_s", "fields", "labelled", "kind"),
    [
        (2400, CANCELLED, 3, "cancelled"),  # scancel: the end brought forward
        (2400, {"JobState": "CANCELLED"}, 3, "cancelled"),
        (110, {}, 2, "walltime"),  # the profile's TERM@120
        (170, {}, 0, "walltime"),  # SLURM's early signal; no fit lowered it
        (2400, {"PreemptTime": soon(-1)}, 2, "preempted"),  # requeued (by SLURM, or the job)
        (2400, {}, 1, "interrupted"),  # 40 min left, still running: a kill of the step itself
        (2400, {"EndTime": "Unknown", "StartTime": "Unknown"}, 1, "interrupted"),
    ],
)
def test_each_stop_is_named_by_what_slurm_says(tmp_path, left_s, fields, labelled, kind):
    stop = stopcause.judge(show_job(left_s, **fields), tmp_path, "41", labelled, NOW)
    assert (stop.cause.kind, stop.limit) == (kind, 60)


def test_the_causes_say_what_the_retry_does(tmp_path):
    cancel = stopcause.judge(show_job(**CANCELLED), tmp_path, "41", 3, NOW)
    assert cancel.cause.reason == (
        "cancelled by a user or an admin (scancel; SLURM ended it before its limit, "
        "COMPLETING); finished files stay done, and the retry keeps its walltime"
    )
    wall = stopcause.judge(show_job(100), tmp_path, "41", 2, NOW)
    assert wall.cause.reason == (
        "stopped at its walltime (60 min) after 2 file(s) of this attempt; finished files stay "
        "done, and the retry asks for a longer walltime"
    )


def test_a_job_the_fit_lowered_and_cut_before_its_first_file_counts_against_the_fit(tmp_path):
    lowered(tmp_path, "41")
    nine = {"TimeLimit": "9", "StartTime": soon(100 - 9 * 60)}
    cut = stopcause.judge(show_job(100, **nine), tmp_path, "41", 0, NOW)
    assert (cut.cause.kind, cut.limit) == ("fit_too_short", 9)
    assert "the fit's floor rises above it, and the retry keeps its walltime" in cut.cause.reason
    # after a file it is an ordinary walltime stop; another job was not lowered
    after = stopcause.judge(show_job(100), tmp_path, "41", 1, NOW)
    other = stopcause.judge(show_job(100), tmp_path, "42", 0, NOW)
    assert (after.cause.kind, other.cause.kind) == ("walltime", "walltime")


def test_outside_slurm_or_without_an_answer_the_stop_is_plain_interrupted(tmp_path):
    assert stopcause.why_stopped(tmp_path, 1, env={}) == stopcause.Stop(failures.INTERRUPTED)
