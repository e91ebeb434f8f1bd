"""What the job keeper makes of one job, round after round: pure verdicts from squeue's rows."""

import pytest
from slurm_samples import job

from shardwise.run.jobevents import Kind
from shardwise.runtime.fates import Act, Duty, Seen, judge

OWN = Duty.own(plugin_requeue=True)


def rounds(duty, *rows, before=None):
    """The verdicts of successive rounds (a row of None: squeue did not list the job)."""
    out, seen = [], before or Seen()
    for row in rows:
        seen, verdict = judge(seen, row, duty)
        out.append(verdict)
    return out, seen


def test_a_preempted_job_is_requeued_once_while_slurm_takes_it_back():
    preempted = job("7", "PREEMPTED", partition="main", requeue=True)
    (_, first, second), _ = rounds(OWN, job("7", "RUNNING"), preempted, preempted)
    assert (first.kind, first.act, first.run) == (Kind.PREEMPTED, Act.REQUEUE, 0)
    assert first.why.startswith("was preempted in partition main (PREEMPTED): requeued")
    assert (second.kind, second.act) == (None, Act.NONE)


def test_our_own_requeue_is_not_said_twice_when_the_job_comes_back():
    rows = (
        job("7", "RUNNING"),
        job("7", "PREEMPTED", requeue=True),
        job("7", "PENDING", restarts=1),
    )
    verdicts, seen = rounds(OWN, *rows)
    assert [v.act for v in verdicts] == [Act.NONE, Act.REQUEUE, Act.NONE]
    assert verdicts[2].kind is None and seen.run == 1


def test_a_job_that_may_not_be_requeued_ends_and_snakemake_retries_it():
    (verdict,), _ = rounds(OWN, job("7", "PREEMPTED", requeue=False))
    assert (verdict.kind, verdict.act) == (Kind.PREEMPTED, Act.END)
    assert "may not be requeued (submitted with --no-requeue)" in verdict.why


def test_a_refused_requeue_ends_the_job_every_round_until_it_is_reported():
    before = Seen(state="PREEMPTED", acted=(0, Act.END), said=(0, "preempted"))
    verdicts, _ = rounds(
        OWN, job("7", "PREEMPTED", requeue=True), job("7", "PREEMPTED"), before=before
    )
    assert [v.act for v in verdicts] == [Act.END, Act.END]
    assert [v.kind for v in verdicts] == [None, None]  # said once, when it happened


@pytest.mark.parametrize(("plugin_requeue", "act"), [(True, Act.REQUEUE), (False, Act.NONE)])
def test_node_fail_is_requeued_only_where_the_plugin_leaves_it_to_slurm(plugin_requeue, act):
    (verdict,), _ = rounds(Duty.own(plugin_requeue=plugin_requeue), job("7", "NODE_FAIL"))
    assert (verdict.kind, verdict.act) == (Kind.NODE_FAIL, act)


def test_a_requeue_slurm_did_is_said_about_the_run_that_ended_and_its_cause_asked():
    verdicts, _ = rounds(
        OWN, job("7", "RUNNING"), job("7", "PENDING", restarts=1, reason="BeginTime")
    )
    requeued = verdicts[1]
    assert (requeued.kind, requeued.act, requeued.run, requeued.ask_history) == (
        Kind.REQUEUED, Act.NONE, 0, True,
    )  # fmt: skip
    assert requeued.why.startswith("was requeued by SLURM (run 2)")


def test_a_job_first_seen_already_requeued_says_its_last_requeue_once():
    verdicts, seen = rounds(OWN, job("7", "PENDING", restarts=2), job("7", "PENDING", restarts=2))
    assert [(v.kind, v.run) for v in verdicts] == [(Kind.REQUEUED, 1), (None, 0)]
    assert "requeued by SLURM before the keeper's first look at it (run 3)" in verdicts[0].why
    assert seen.run == 2
    adopted, _ = rounds(Duty.adopted(), job("7", "PENDING", restarts=2))
    assert "requeued by SLURM while no workflow kept it (run 3)" in adopted[0].why


def test_a_job_held_after_a_requeue_is_cancelled_once():
    held = job("7", "PENDING", restarts=1, reason="launch failed requeued held")
    verdicts, _ = rounds(OWN, held, held)
    assert [(v.kind, v.act) for v in verdicts] == [(Kind.HELD, Act.CANCEL), (None, Act.NONE)]
    user_hold = job("7", "PENDING", restarts=0, reason="JobHeldUser")
    verdicts, _ = rounds(OWN, user_hold, user_hold)
    assert [(v.kind, v.act) for v in verdicts] == [(Kind.ON_HOLD, Act.NONE), (None, Act.NONE)]
    assert verdicts[0].why == (
        "is on hold (JobHeldUser: put there by its owner, `scontrol hold`): the run waits for "
        "it; `scontrol release 7` lets it start"
    )
    admin_hold = job("7", "PENDING", restarts=0, reason="JobHeldAdmin")
    (verdict,), _ = rounds(OWN, admin_hold)
    assert (verdict.kind, verdict.act) == (Kind.ON_HOLD, Act.NONE)
    assert "put there by an admin" in verdict.why


def test_a_job_missing_from_squeue_is_lost_on_the_second_round_and_ended():
    verdicts, seen = rounds(OWN, job("7", "COMPLETED"), None, None, None)
    assert [v.act for v in verdicts] == [Act.NONE, Act.NONE, Act.END, Act.END]
    assert verdicts[2].kind is Kind.LOST and verdicts[3].kind is None
    assert "has left squeue before its end was seen (last seen COMPLETED" in verdicts[2].why
    assert seen.missing == 3


def test_ends_the_plugin_reports_are_left_to_it_for_own_jobs():
    for state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
        (verdict,), _ = rounds(OWN, job("7", state))
        assert (verdict.kind, verdict.act) == (None, Act.NONE), state


@pytest.mark.parametrize(
    ("state", "kind"),
    [("COMPLETED", Kind.ENDED), ("PREEMPTED", Kind.PREEMPTED), ("NODE_FAIL", Kind.NODE_FAIL)],
)
def test_every_end_of_an_adopted_job_is_the_keepers_and_none_is_requeued(state, kind):
    (verdict,), _ = rounds(Duty.adopted(), job("7", state, requeue=True))
    assert (verdict.kind, verdict.act) == (kind, Act.END)
