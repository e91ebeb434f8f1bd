"""A job the user puts on hold: the run waits for it and says so, once, through the job
keeper that shardwise's executor plugin attaches (``executor: shardwise``).

The demo (8 shards, K=2: 4 jobs) with ``--jobs 3`` on the 2 (fake) GPUs: 2 jobs run and
hold at the test gate, the 3rd pends. ``scontrol hold`` on it gives ``JobHeldUser``: the
console says the job is on hold and how to release it, ``job-events.jsonl`` gets one
``on_hold`` event, and ``coverage`` counts it. After ``scontrol release`` and the gate's
opening the run completes with every shard labelled once. (The test runs as root, whose
``scontrol hold`` is an admin's hold: ``uhold`` is the owner's.)
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import slurmrun as sr
from e2e import Gate, gated_shardwise, ledger_counts

from shardwise.cli.main import main
from shardwise.run import jobevents

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

SHARDS = 8


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    with slurm_cluster.exclusive():
        yield slurm_cluster


def test_a_job_on_hold_is_one_line_one_event_and_a_count_and_the_run_waits(cluster, tmp_path):
    configfile = sr.demo(tmp_path, total_shards=SHARDS)
    workdir = tmp_path / "work"
    workdir.mkdir()
    run_dir = tmp_path / "demo" / "run"
    gate = Gate(tmp_path / "gate", after_files=1)
    env = gated_shardwise(tmp_path / "bin", tmp_path / "ledger", gate)
    cmd = sr.snakemake(workdir, configfile, sr.PROFILE, sr.PROFILE_CI,
                       extra=("--jobs", "3", "--group-components", "classify=2"))  # fmt: skip
    log = tmp_path / "run.log"
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    try:

        def pending_job():
            assert proc.poll() is None, log.read_text()[-4000:]
            jobs = sr.squeue_of(workdir)
            running = [j for j in jobs if j["state"] == "RUNNING"]
            pending = [j for j in jobs if j["state"] == "PENDING"]
            return pending[0]["id"] if len(running) == 2 and pending else None

        held = sr.wait_for(pending_job, 300, f"2 running jobs and 1 pending ({log})")
        # as the job's owner would (root's plain `hold` is an admin's: JobHeldAdmin)
        subprocess.run(["scontrol", "uhold", held], check=True)
        said = "is on hold (JobHeldUser: put there by its owner, `scontrol hold`)"
        sr.wait_for(lambda: said in log.read_text(), 120, f"the keeper's line ({log})")
        events = [e for e in jobevents.load(run_dir) if e.kind == jobevents.Kind.ON_HOLD]
        assert [e.job_id for e in events] == [held]
        coverage = sr.shardwise("coverage", "--run-dir", str(run_dir))
        assert "1 job(s) put on hold by their owner or an admin" in coverage.stdout, coverage
        subprocess.run(["scontrol", "release", held], check=True)
        gate.open()
        assert proc.wait(timeout=420) == 0, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            sr.interrupt(proc)
        gate.open()  # gated steps end at once
        sr.scancel_workdir(workdir)
        sr.scancel_workdir(tmp_path)
    text = log.read_text()
    line = next(ln for ln in text.splitlines() if said in ln)
    print(f"\n--- the hold, as the console said it ---\n{line}", file=sys.stderr)
    assert text.count(said) == 1
    assert "the job keeper is off" not in text and "untested versions" not in text
    assert ledger_counts(tmp_path / "ledger") == dict.fromkeys(range(SHARDS), 1)
    assert main(["verify", "--run-dir", str(run_dir), "--complete"]) == 0
