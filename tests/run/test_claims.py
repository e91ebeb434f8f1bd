"""Shard claims: one live holder per shard; stale claims are taken over, live ones refused."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from shardwise.cli.main import main
from shardwise.errors import ShardClaimedError
from shardwise.run import claims


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_claim_records_who_holds_the_shard_and_is_removed_at_the_end(tmp_path):
    with claims.held(tmp_path, 3) as claim:
        on_disk = json.loads(claims.claim_path(tmp_path, 3).read_text())
        assert on_disk["shard"] == 3
        assert on_disk["pid"] == os.getpid()
        assert on_disk["host"] == os.uname().nodename
        assert on_disk["token"] == claim.token
        assert on_disk["started_at"]
    assert not claims.claim_path(tmp_path, 3).exists()


def test_the_claim_is_released_when_the_job_fails(tmp_path):
    with pytest.raises(RuntimeError), claims.held(tmp_path, 1):
        raise RuntimeError("shard failed")
    assert claims.read_claims(tmp_path) == {}


def test_a_live_holder_refuses_a_second_job_and_its_claim_stays(tmp_path):
    with claims.held(tmp_path, 2) as first:
        before = claims.claim_path(tmp_path, 2).read_bytes()
        with pytest.raises(ShardClaimedError) as err:
            claims.acquire(tmp_path, 2)
        assert f"shard 2 is claimed by process {os.getpid()} on" in str(err.value)
        assert "stopped without touching any output" in str(err.value)
        assert claims.claim_path(tmp_path, 2).read_bytes() == before
    assert first.shard == 2


def test_a_stale_claim_of_a_dead_process_is_taken_over(tmp_path):
    stale = replace(claims.for_this_process(5), pid=_dead_pid(), token="old")
    claims.claim_path(tmp_path, 5).parent.mkdir(parents=True)
    claims.claim_path(tmp_path, 5).write_bytes(stale.to_bytes())
    with claims.held(tmp_path, 5) as mine:
        assert claims.read_claim(claims.claim_path(tmp_path, 5)).token == mine.token
    assert list((tmp_path / "claims").iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_reused_pid_is_not_mistaken_for_the_holder():
    # our own (live) pid, but another process's identity: the holder is gone
    stale = replace(claims.for_this_process(6), process="other-boot:123", token="old")
    assert claims.judge(stale, live_jobs=None) == claims.Verdict(
        False, f"process {os.getpid()} is gone"
    )


def test_a_claim_from_another_host_without_slurm_cannot_be_checked_and_is_refused(tmp_path):
    other = replace(claims.for_this_process(7), host="elsewhere", slurm_job_id=None)
    claims.claim_path(tmp_path, 7).parent.mkdir(parents=True)
    claims.claim_path(tmp_path, 7).write_bytes(other.to_bytes())
    with pytest.raises(ShardClaimedError, match="cannot be checked from here.*delete"):
        claims.acquire(tmp_path, 7)


@pytest.mark.parametrize(
    ("live_jobs", "steps", "alive"),
    [
        ({"12": "RUNNING"}, None, True),
        ({"12": "RUNNING"}, {"12.0"}, True),
        ({"12": "RUNNING"}, {"12.1", "12.batch"}, False),  # the step that held it ended
        ({"12": "COMPLETING"}, None, True),
        ({}, None, False),  # squeue no longer lists the job: it ended
        (None, None, None),  # squeue could not be asked, other host
    ],
)
def test_slurm_claims_are_judged_by_what_squeue_lists(live_jobs, steps, alive):
    claim = replace(claims.for_this_process(1), host="node7", slurm_job_id="12", slurm_step_id="0")
    assert claims.judge(claim, live_jobs=live_jobs, live_steps=steps, here="login1").alive is alive


def test_release_leaves_a_claim_another_job_took_over(tmp_path):
    mine = claims.acquire(tmp_path, 4)
    theirs = replace(mine, token="theirs")
    claims.claim_path(tmp_path, 4).write_bytes(theirs.to_bytes())
    claims.release(tmp_path, mine)
    assert claims.read_claim(claims.claim_path(tmp_path, 4)).token == "theirs"


def test_read_claims_ignores_files_that_are_not_claims(tmp_path):
    d = tmp_path / "claims"
    d.mkdir()
    (d / "workflow.json").write_text("{}")
    (d / "jobs.json").write_text("{}")
    (d / ".3.json.stale-ab").write_text("{}")
    (d / "9.json").write_text("not json")
    with claims.held(tmp_path, 1):
        assert list(claims.read_claims(tmp_path)) == [1]


_RACER = """
import sys, time
from pathlib import Path
from shardwise.run import claims
from shardwise.errors import ShardClaimedError
run_dir = Path(sys.argv[1])
try:
    with claims.held(run_dir, 0):
        print("won", flush=True)
        while not (run_dir / "release").exists():  # held until every racer has answered
            time.sleep(0.02)
except ShardClaimedError:
    print("refused", flush=True)
"""


def test_of_racing_jobs_on_one_shard_exactly_one_wins(tmp_path):
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    results = sorted(p.stdout.readline().strip() for p in procs)  # the winner still holds it
    (tmp_path / "release").touch()
    for p in procs:
        p.communicate(timeout=60)
    assert results == ["refused", "refused", "refused", "won"]
    assert claims.read_claims(tmp_path) == {}


def test_classify_shard_on_a_claimed_shard_exits_1_naming_the_holder(tmp_path, capsys):
    with claims.held(tmp_path, 0):
        assert main(["classify-shard", "--run-dir", str(tmp_path), "--shard", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("shardwise: shard 0 is claimed by process")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claims"]


def test_the_jobs_cache_reads_its_entries_as_records_and_a_damaged_one_as_a_miss(tmp_path):
    script = claims.BatchScript("/repo/Snakefile", ("c.yaml",), (3, 4))
    claims.write_jobs_cache(tmp_path, {"7@t": script})
    assert claims.read_jobs_cache(tmp_path) == {"7@t": script}
    path = tmp_path / claims.CLAIMS_DIR / claims.JOBS_CACHE
    path.write_text('{"7@t": {"shards": ["3"]}, "8@t": {"shards": [1]}, "9@t": 2}')
    assert claims.read_jobs_cache(tmp_path) == {"8@t": claims.BatchScript(shards=(1,))}
    path.write_text("not json")
    assert claims.read_jobs_cache(tmp_path) == {}
