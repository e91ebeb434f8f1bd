"""The walltime adaptation's rounds that need no cluster: what one file needs decides, a
job whose limit is below it is replaced before it starts, and nothing is lowered on a
guess before any file finished. SLURM's answers and actions are monkeypatched onto the
module's own names (tests/slurm/test_adapt.py runs it on the real cluster)."""

from __future__ import annotations

import io
from types import SimpleNamespace

from slurm_samples import job

from shardwise.planner.walltime import Floor
from shardwise.run import adaptation
from shardwise.runtime import adapt
from shardwise.slurm.queries import Answer


def adapter(tmp_path, floors) -> adapt.Adapter:
    """An adapter whose floor per shard set is ``floors`` (a function of the shards)."""
    knobs = adapt.AdaptSettings(check_seconds=60, probe_seconds=300, floor=floors)
    return adapt.Adapter(run_dir=tmp_path, settings=knobs, out=io.StringIO(), user="me",
                         started=True)  # fmt: skip


def test_a_pending_job_below_what_a_file_needs_is_replaced_and_the_floor_said(
    tmp_path, monkeypatch
):
    cancelled: list[str] = []
    monkeypatch.setattr(adapt.control, "cancel", lambda ids, **_kw: cancelled.extend(ids) or
                        Answer(True))  # fmt: skip
    need = Floor(10, "p90 of 7 finished file(s)' time, 338 s")
    a = adapter(tmp_path, lambda shards: need)
    pending = {"41": (job("41", time_limit_minutes=5), (3,)),
               "42": (job("42", time_limit_minutes=30), (4, 5))}  # fmt: skip
    a._replace_short(pending)
    assert cancelled == ["41"]
    lines = a.out.getvalue().splitlines()
    assert lines[0] == (
        "shardwise adapt: one file of the pending shards now needs 10 min: p90 of 7 finished "
        "file(s)' time, 338 s"
    )
    assert lines[1].startswith("shardwise adapt: replaced job(s) 41 (5 < 10 min, shards 3): ")
    assert "Snakemake submits them again with at least that limit" in lines[1]
    a._replace_short({"42": pending["42"]})  # the same floor: said once
    assert len(a.out.getvalue().splitlines()) == 2
    actions = [e.action for e in adaptation.load(tmp_path).events]
    assert actions == ["floor", "replaced"]


def test_before_any_file_finished_one_job_alone_measures_the_first_file(tmp_path, monkeypatch):
    """No fit on a guess (the configured rate's estimate cut jobs before their first
    file): the probed job alone is lowered to the longest limit SLURM's plan starts now;
    the others keep their limits until its figure."""
    monkeypatch.setattr(adapt.queries, "job_detail", lambda *a, **kw: Answer({"JobId": "7"}))
    monkeypatch.setattr(adapt.queries, "config", lambda *a, **kw: Answer({}))
    asked = []
    answer = SimpleNamespace(longest_now=20, calls=4, seconds=1.5, submitted=2,
                             changed=lambda: "2 probe job(s)")  # fmt: skip

    def probe(options, own, floor, **kw):
        asked.append((own, floor))
        return answer

    monkeypatch.setattr(adapt.plan_probe, "probe", probe)
    lowered = []
    monkeypatch.setattr(adapt.control, "lower_time_limit",
                        lambda job_id, minutes, **kw: lowered.append((job_id, minutes)) or
                        Answer(True))  # fmt: skip
    unknown = Floor(None, "no file of this run has finished yet")
    a = adapter(tmp_path, lambda shards: unknown)
    reserved = job("7", reason="ReqNodeNotAvail, Reserved for maintenance", time_limit_minutes=60)
    other = job("8", reason="ReqNodeNotAvail, Reserved for maintenance", time_limit_minutes=60)
    a._probe(reserved, {"7": (reserved, (1, 2)), "8": (other, (3,))})
    assert asked == [(60, adapt.FIRST_FILE_FLOOR)] and lowered == [("7", 20)]
    assert a.record.fit is None  # no fit for the others or the next submissions
    (line,) = a.out.getvalue().splitlines()
    assert line.startswith("shardwise adapt: lowered job(s) 7 (60 -> 20 min, shards 1-2): ")
    assert (
        "job 7 alone is lowered to the longest limit SLURM's plan starts now, 20 min, to " in line
    )
    assert "the other jobs keep their limits until its figure" in line
