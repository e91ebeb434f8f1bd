"""``job-events.jsonl``: one line per event, torn lines skipped, each job's run counted once."""

from datetime import datetime

from shardwise.run import jobevents
from shardwise.run.jobevents import JobEvent, Kind

NOW = datetime(2026, 12, 6, 12, 0)


def event(job_id, kind, run=0, at="2026-12-06T11:30:00", **over):
    return JobEvent(at=at, job_id=job_id, kind=str(kind), run=run, **over)


def test_events_round_trip_and_a_torn_line_is_skipped(tmp_path):
    first = event("7", Kind.PREEMPTED, shards=(3, 4), state="PREEMPTED", action="requeued")
    jobevents.append(tmp_path, first)
    with jobevents.path(tmp_path).open("a") as fh:
        fh.write('{"at": "2026-12-06T11:31:00", "job_id": "8", "ki')  # a writer killed mid-line
        fh.write("\n" + '{"at": "x", "job_id": "9", "kind": "exploded"}' + "\n")
    second = event("8", Kind.LOST, run=1)
    jobevents.append(tmp_path, second)
    assert jobevents.load(tmp_path) == [first, second]
    assert jobevents.load(tmp_path / "absent") == []


def test_a_preemption_told_by_the_job_and_seen_as_a_requeue_by_the_keeper_counts_once():
    events = [
        event("7", Kind.PREEMPTED, run=0, action="requeued"),  # the job requeued itself
        event("7", Kind.REQUEUED, run=0),  # the keeper saw its restart count go up
        event("7", Kind.PREEMPTED, run=0),  # a second process said it again
        event("7", Kind.PREEMPTED, run=1, at="2026-12-06T09:00:00"),
        event("8", Kind.REQUEUED, run=0),  # no cause known
        event("9", Kind.NODE_FAIL, run=0),
        event("9", Kind.LOST, run=1),
        event("10", Kind.ADOPTED),
    ]
    tally = jobevents.tally(events, NOW)
    assert tally == jobevents.Tally(
        preemptions=2,
        preemptions_last_hour=1,
        node_failures=1,
        requeued_other=1,
        held=0,
        lost=1,
        adopted=1,
        first_at="2026-12-06T09:00:00",
    )
    assert tally.any
    assert round(tally.per_hour(NOW), 3) == 0.667  # two in the three hours since the first


def test_no_events_no_rate():
    tally = jobevents.tally([event("1", Kind.ADOPTED)], NOW)
    assert (tally.any, tally.per_hour(NOW), tally.adopted) == (False, None, 1)
