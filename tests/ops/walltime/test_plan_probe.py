"""SLURM's plan for probe jobs of the run's request: the ladder, each probe's outcome, the
longest limit that starts now, and how the status view and its advice use it."""

import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta

from slurm_samples import job

from shardwise.ops.walltime import plan_probe
from shardwise.ops.walltime import probe as walltime_probe
from shardwise.ops.walltime import rows as walltime_rows
from shardwise.ops.walltime.plan_probe import Outcome, Planned, Rung
from shardwise.slurm import control
from shardwise.slurm.queries import Answer

NOW = datetime(2026, 12, 1, 6, 0)


def test_the_ladder_halves_the_jobs_own_limit_down_to_what_one_file_needs():
    assert plan_probe.ladder(960, 5) == [960, 480, 240, 120, 60, 30, 15, 7, 5]
    assert plan_probe.ladder(60, 1) == [60, 30, 15, 7, 3, 1]
    assert plan_probe.ladder(10, 10) == [10]
    assert plan_probe.ladder(8, 20) == [8]  # a floor above the limit: only the limit


def test_the_second_ladder_lies_evenly_between_what_started_and_what_did_not():
    assert plan_probe.refine(15, 30) == [26, 23, 19]
    assert plan_probe.refine(0, 5) == [4, 2, 1]
    assert plan_probe.refine(7, 8) == []


def test_each_probe_reads_as_started_planned_behind_a_reservation_or_unplanned():
    at = NOW + timedelta(minutes=20)
    maint = "ReqNodeNotAvail, Reserved for maintenance"
    cases = [
        (job("1", "COMPLETED", start_time=NOW), Rung(20, Outcome.STARTED, NOW.isoformat(), "")),
        (job("2", reason=maint), Rung(20, Outcome.RESERVED, None, maint)),
        (
            job("3", reason="Priority", start_time=at),
            Rung(20, Outcome.PLANNED, at.isoformat(), "Priority"),
        ),
        (job("4", reason="Priority"), Rung(20, Outcome.UNPLANNED, None, "Priority")),
        (job("5", "DEADLINE", reason=""), Rung(20, Outcome.UNPLANNED, None, "DEADLINE")),
        (None, Rung(20, Outcome.UNPLANNED, None, "gone from the queue")),
    ]
    assert [plan_probe.rung_of(20, j, NOW) for j, _ in cases] == [want for _, want in cases]


def test_the_longest_limit_that_starts_now_is_the_longest_started_or_planned_within_a_minute():
    soon = (NOW + timedelta(seconds=30)).isoformat()
    later = (NOW + timedelta(minutes=25)).isoformat()
    rungs = [
        Rung(60, Outcome.RESERVED, None, "maint"),
        Rung(30, Outcome.PLANNED, later),
        Rung(20, Outcome.PLANNED, soon),
        Rung(10, Outcome.STARTED, NOW.isoformat()),
    ]
    assert plan_probe.longest_now(rungs, NOW) == 20
    assert plan_probe.longest_now(rungs[:2], NOW) is None


def test_the_answer_holds_from_when_its_probe_started_not_from_the_probes_end():
    """The refining round ends backfill passes after the answering probe started: a fit
    counted from the end would ask for a limit past what SLURM's plan has free."""
    soon = NOW + timedelta(seconds=30)
    rungs = [
        Rung(13, Outcome.PLANNED, (NOW + timedelta(minutes=9)).isoformat()),
        Rung(11, Outcome.STARTED, (NOW - timedelta(seconds=40)).isoformat()),
        Rung(7, Outcome.STARTED, (NOW - timedelta(seconds=70)).isoformat()),
    ]
    assert _planned(11, rungs).held_at(NOW) == NOW - timedelta(seconds=40)
    planned = [Rung(20, Outcome.PLANNED, soon.isoformat()), *rungs]
    assert _planned(20, planned).held_at(NOW) == soon  # the plan starts it in 30 s
    assert _planned(11, [Rung(11, Outcome.STARTED, None)]).held_at(NOW) == NOW  # no start read


def test_a_probe_lives_at_most_two_rounds_of_two_backfill_passes_and_a_minute():
    assert plan_probe.lifetime_minutes(5) == 2
    assert plan_probe.lifetime_minutes(30) == 4


def _planned(longest, rungs, **over):
    base = Planned(
        rungs=tuple(rungs),
        longest_now=longest,
        floor=5,
        calls=14,
        seconds=21.5,
        submitted=9,
        started=2,
    )
    return replace(base, **over)


def test_why_nothing_starts_now_is_said_in_slurms_words():
    later = (NOW + timedelta(minutes=25)).isoformat()
    planned = _planned(None, [Rung(5, Outcome.PLANNED, later, "Resources")])
    assert planned.why_none() == (
        "no limit down to 5 min starts now: SLURM plans it for 2026-12-01 06:25:00 (Resources)"
    )
    reserved = _planned(None, [Rung(5, Outcome.RESERVED, None, "maint")])
    assert reserved.why_none().endswith(
        "even that runs into a reservation (the window is open or about to)"
    )
    at_cap = _planned(None, [], problem="at the submit cap, no probe can be submitted (x)")
    assert at_cap.why_none() == "at the submit cap, no probe can be submitted (x)"
    assert _planned(None, [], submitted=0).changed() == "nothing"


def test_slurms_plan_overrules_a_window_row_that_claims_more_than_starts_now():
    """A 1-CPU allocation located the window 39 min away, but the run's own request (GPUs
    held by another user until +20) starts only 19 min now: the advice says 19."""
    pending = job("7", reason="ReqNodeNotAvail, Reserved for maintenance", time_limit_minutes=960)
    located = walltime_probe.Located(
        minutes=40,
        start=(NOW + timedelta(minutes=40)).isoformat(),
        method=walltime_probe.Method.ALLOCATED,
        calls=9,
        seconds=1.5,
        changed="x",
    )
    rungs = [
        Rung(30, Outcome.UNPLANNED, None, "Priority"),
        Rung(19, Outcome.STARTED, NOW.isoformat()),
    ]
    plan = _planned(19, rungs)
    nodes = Answer([])
    probe = walltime_rows.probe(
        pending,
        1,
        {},
        reservations=Answer(None, "hidden", "hidden"),
        nodes=nodes,
        now=NOW,
        hidden=Answer(located),
        plan=plan,
    )
    rows = {r.label: r for r in probe.rows}
    row = rows[walltime_rows.PLAN_LABEL]
    assert (row.minutes, row.starts_now, row.method) == (19, True, walltime_probe.Method.PLANNED)
    assert row.source == (
        "SLURM's plan: a job of your request asking 19 min started at once, one "
        "asking 30 min did not (Priority)"
    )
    assert rows[walltime_rows.WINDOW_LABEL].starts_now is None
    assert "--max-minutes 19`" in probe.advice
    assert probe.planned is plan


def test_when_slurms_plan_starts_nothing_the_advice_says_the_jobs_wait_for_the_window():
    pending = job("7", reason="ReqNodeNotAvail, Reserved for maintenance", time_limit_minutes=960)
    plan = _planned(None, [Rung(5, Outcome.RESERVED, None, "maint")])
    probe = walltime_rows.probe(
        pending, 1, {}, reservations=None, nodes=Answer([]), now=NOW, plan=plan
    )
    [row] = probe.rows
    assert (row.minutes, row.starts_now, row.problem) == (5, None, plan.why_none())
    assert probe.advice.startswith("SLURM's plan for your jobs' request: no limit down to 5 min")
    assert "retime" not in probe.advice


def test_a_probe_names_its_owner_and_only_a_dead_owners_probes_count_as_left():
    """A live process's probes (this one's, another host's: cannot tell) are left to it; a
    killed one's on this host, and unmarked ones, are leftovers."""
    me = control.ProbeOwner.this()
    assert control.ProbeOwner.from_comment(me.to_comment()) == me
    assert control.ProbeOwner.from_comment("rule_classify_wildcards_2") is None
    assert plan_probe.owner_alive(me.to_comment())
    assert plan_probe.owner_alive(control.ProbeOwner("another-login-node", 1).to_comment())
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert not plan_probe.owner_alive(control.ProbeOwner(me.host, gone.pid).to_comment())
    assert not plan_probe.owner_alive("")


def test_what_the_probe_changed_says_when_it_first_waited_for_another_process():
    rungs = (Rung(60, Outcome.STARTED),)
    plan = Planned(
        rungs=rungs,
        longest_now=60,
        floor=1,
        calls=9,
        seconds=30.0,
        submitted=1,
        started=1,
        waited=12.5,
    )
    assert "first waited 12.5 s for another shardwise process's probes" in plan.changed()
    assert "waited" not in replace(plan, waited=0.2).changed()
