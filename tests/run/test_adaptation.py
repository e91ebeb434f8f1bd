"""``walltime-adapt.json``: the fit in force and the changes, written and read as one record."""

from datetime import datetime, timedelta

import pytest

from shardwise.errors import RecordError
from shardwise.run import adaptation
from shardwise.run.adaptation import Adaptation, Event, Fit

NOW = datetime(2026, 12, 1, 6, 0)
FIT = Fit(
    horizon=(NOW + timedelta(minutes=20)).isoformat(),
    minutes=20,
    floor=5,
    since=NOW.isoformat(),
    reason="SLURM's plan",
)


def test_the_record_round_trips_with_its_fit_and_events(tmp_path):
    event = Event(
        at=NOW.isoformat(),
        action="fitted",
        text="line",
        minutes=20,
        jobs=("7", "8"),
        probe_calls=14,
        probe_seconds=21.5,
        probe_jobs=9,
    )
    record = Adaptation().with_event(event, FIT)
    adaptation.save(tmp_path, record)
    assert adaptation.load(tmp_path) == record
    assert adaptation.load(tmp_path / "none") is None


def test_a_damaged_field_is_refused_by_name(tmp_path):
    (tmp_path / adaptation.ADAPT_JSON).write_text(
        '{"fit": {"horizon": "x", "minutes": true, "floor": 5, "since": "", "reason": ""}}'
    )
    with pytest.raises(RecordError, match="'minutes'"):
        adaptation.load(tmp_path)
    (tmp_path / adaptation.ADAPT_JSON).write_text('{"events": [3]}')
    with pytest.raises(RecordError, match=r"'events'\[0\] must be an object"):
        adaptation.load(tmp_path)
    assert adaptation.cap(tmp_path, NOW) is None  # a damaged record caps nothing


def test_the_cap_shrinks_to_the_horizon_and_ends_below_one_files_need(tmp_path):
    adaptation.save(tmp_path, Adaptation(FIT))
    assert adaptation.cap(tmp_path, NOW) == 20
    assert adaptation.cap(tmp_path, NOW + timedelta(minutes=12)) == 8
    assert adaptation.cap(tmp_path, NOW + timedelta(minutes=16)) is None  # 4 < 5 min floor


def test_only_the_last_events_are_kept():
    record = Adaptation()
    for i in range(adaptation.KEEP + 3):
        record = record.with_event(Event(at=str(i), action="lowered", text="x"), None)
    assert len(record.events) == adaptation.KEEP
    assert record.events[0].at == "3"
