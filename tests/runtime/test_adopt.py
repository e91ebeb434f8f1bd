"""The adoption waits for an earlier invocation's holders, and stops when its workflow dies."""

import io
import subprocess

from shardwise.run import claims, jobevents, markers
from shardwise.run.adoption import (
    Adoption,
    Holder,
    adoption_end_path,
    adoption_path,
    read_adoption,
    write_adoption,
)
from shardwise.runtime import adopt


def holder(proc: subprocess.Popen, *shards: int) -> Holder:
    return Holder(
        shards=shards,
        pid=proc.pid,
        host=claims.hostname(),
        process=claims.process_identity(proc.pid),
    )


def test_orphaned_local_holders_are_waited_for_and_what_they_left_is_named(tmp_path):
    markers.write_shard_marker(
        tmp_path,
        markers.ShardMarker(
            shard=1, total_shards=4, minimum_shard_index=0, tasks=1, files=1, docs=1
        ),
    )
    quick, slow = subprocess.Popen(["true"]), subprocess.Popen(["sleep", "0.5"])
    adoption = Adoption(at="now", token="t", holders=(holder(quick, 1), holder(slow, 2)))
    out = io.StringIO()
    waited = adopt.wait(tmp_path, adoption, every=0.05, main_alive=lambda: True, out=out)
    quick.wait()
    slow.wait()
    assert waited == adopt.Waited(jobs=0, processes=2, left=(2,))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(
        "shardwise: adopted 2 live job(s) of an earlier invocation (shards 1-2): this run "
        "keeps them as its own"
    )
    assert any(line.endswith("ended: its shards are done") for line in lines)
    assert any("(shards 2) ended: 1 shard(s) left: this run labels them" in line for line in lines)


def test_the_wait_stops_when_the_workflow_that_started_it_dies(tmp_path):
    live = subprocess.Popen(["sleep", "30"])
    try:
        adoption = Adoption(at="now", token="t", holders=(holder(live, 0),))
        waited = adopt.wait(
            tmp_path, adoption, every=0.01, main_alive=lambda: False, out=io.StringIO()
        )
    finally:
        live.kill()
        live.wait()
    assert waited.orphaned


def test_adopted_slurm_jobs_are_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(adopt.Keeper, "check", lambda self: 0)  # SLURM: every job already gone
    adoption = Adoption(at="now", token="t", holders=(Holder(shards=(4, 5), job_id="31"),))
    waited = adopt.wait(tmp_path, adoption, every=0.01, main_alive=lambda: True, out=io.StringIO())
    assert waited == adopt.Waited(jobs=1, processes=0, left=(4, 5))
    (event,) = jobevents.load(tmp_path)
    assert (event.job_id, event.kind, event.shards) == ("31", "adopted", (4, 5))


def test_the_adoption_record_round_trips_and_refuses_a_damaged_shard_list(tmp_path):
    holders = (
        Holder(shards=(2, 3), job_id="7"),
        Holder(shards=(5,), pid=4, host="h"),
    )
    adoption = Adoption(at="2026-12-06T05:00:00", token="9-ab", holders=holders)
    write_adoption(tmp_path, adoption)
    assert read_adoption(tmp_path) == adoption
    adoption_path(tmp_path).write_text('{"at": "x", "token": "t", "holders": [{"shards": ["2"]}]}')
    try:
        read_adoption(tmp_path)
    except claims.RecordError as e:
        assert "[holders][0]: field 'shards' must be an array of integers" in str(e)
    else:
        raise AssertionError("a damaged shard list was read")
    end = adoption_end_path(tmp_path, "old", "7")
    end.parent.mkdir(parents=True)
    end.write_text("{}")
    write_adoption(tmp_path, None)
    assert read_adoption(tmp_path) is None and not end.exists()
