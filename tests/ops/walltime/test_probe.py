"""The blind window search's fallback (``ops/walltime/probe.py`` ``locate_window``): where
every 1-CPU request pended and was revoked, a controller too busy to grant within five
seconds is told apart from a partition with no room by one patient request."""

from datetime import datetime, timedelta

from shardwise.ops.walltime import probe
from shardwise.slurm import control
from shardwise.slurm.queries import Answer

WINDOW = 37  # minutes to the hidden window


def _searched(monkeypatch, grants_within: int | None) -> tuple[Answer, list[tuple[int, int]]]:
    """``locate_window`` against a controller that grants a job ending before the window
    only to a request patient for ``grants_within`` seconds (None: never: no room)."""
    asked: list[tuple[int, int]] = []
    later = datetime.now() + timedelta(hours=4)  # --test-only: the jobs ahead hide it
    monkeypatch.setattr(probe, "test_only", lambda small, options, timeout: small)
    monkeypatch.setattr(probe, "step_limit", lambda small, asked: (None, Answer(later)))

    def allocation(options, timeout, *, patience):
        minutes = int(options[-1])
        asked.append((minutes, patience))
        fits = minutes < WINDOW and grants_within is not None and patience >= grants_within
        return Answer(control.Allocation.ALLOCATED if fits else control.Allocation.REVOKED)

    monkeypatch.setattr(probe.control, "try_allocation", allocation)
    monkeypatch.setattr(probe, "window_options", lambda request, minutes: [str(minutes)])
    return probe.locate_window({}, [60, 120], timeout=5), asked


def test_a_busy_controller_is_asked_again_patiently_and_the_window_found(monkeypatch):
    found, asked = _searched(monkeypatch, grants_within=control.SLOW_SECONDS)
    assert found.ok and found.value.minutes == WINDOW - 1, found
    assert found.value.method == probe.Method.ALLOCATED
    assert "once more after 20 s" in found.value.changed
    assert {p for _m, p in asked} == {control.PATIENT_SECONDS, control.SLOW_SECONDS}


def test_no_room_costs_one_patient_request_and_says_so(monkeypatch):
    found, asked = _searched(monkeypatch, grants_within=None)
    assert not found.ok and "no 1-CPU job was allocated at any limit" in found.problem
    assert [m for m, p in asked if p == control.SLOW_SECONDS] == [1]  # the shortest, once
