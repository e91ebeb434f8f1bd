"""A Snakemake main process killed with SIGKILL: the same command, run again, finishes the run.

The demo (8 shards, K=2: 4 SLURM jobs) runs with `--jobs 3` on the 2 (fake) GPUs
of the test cluster, each shard job holding its claim at a test gate
(``shardwise.classify.gate``) until the test opens it, then labelling for real:

1. the first invocation submits 3 jobs: 2 RUNNING (each at the gate), 1 PENDING; it is
   killed with SIGKILL (its jobs keep running, as after a lost login node);
2. the same command, run again with no ``--unlock``, clears the dead process's lock,
   adopts the 6 shards of those jobs and submits only the 4th job; once it has (the
   event: its submission line), the gate opens, and it waits for the adopted jobs and
   completes the run (report) in the same invocation: `verify --complete` passes.

Counted from sacct (the `--target-jobs` of every sbatch from the workflow's
directory) and from the shards' own ledger: one SLURM job and one run per shard.
Also: a stale claim (its job cancelled) does not block its shard; a live one does.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import replace

import pytest
import slurmrun as sr
from e2e import Gate, gated_shardwise, ledger_counts

from shardwise.cli.main import main
from shardwise.planner import inflight
from shardwise.run import claims

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

SHARDS = 8


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    with slurm_cluster.exclusive():
        yield slurm_cluster


def test_a_sigkilled_run_is_finished_by_the_same_command_run_again(cluster, tmp_path):
    configfile = sr.demo(tmp_path, total_shards=SHARDS)
    workdir = tmp_path / "work"
    workdir.mkdir()
    run_dir = tmp_path / "demo" / "run"
    gate = Gate(tmp_path / "gate")
    env = gated_shardwise(tmp_path / "bin", tmp_path / "ledger", gate)
    cmd = sr.snakemake(workdir, configfile, sr.PROFILE, sr.PROFILE_CI,
                       extra=("--jobs", "3", "--group-components", "classify=2"))  # fmt: skip
    first_log = tmp_path / "first.log"
    first = subprocess.Popen(cmd, stdout=first_log.open("w"), stderr=subprocess.STDOUT, env=env)
    try:

        def two_running_one_pending():
            states = [j["state"] for j in sr.squeue_of(workdir)]
            held = claims.read_claims(run_dir)
            at_gate = len(gate.waiting())
            running, pending = states.count("RUNNING"), states.count("PENDING")
            return running == 2 and pending == 1 and len(held) == 2 and at_gate == 2

        sr.wait_for(two_running_one_pending, 240, f"2 running + 1 pending jobs ({first_log})")
    finally:
        os.kill(first.pid, signal.SIGKILL)  # the main process only: its SLURM jobs go on
        first.wait()
    before = {j["id"] for j in sr.squeue_of(workdir)}
    try:
        second_log = tmp_path / "second.log"
        second = subprocess.Popen(cmd, env=env, stdout=second_log.open("w"),
                                  stderr=subprocess.STDOUT)  # fmt: skip

        def submitted_the_fourth_job():  # the event: it has planned, then submitted
            assert second.poll() is None, second_log.read_text()[-4000:]
            return "has been submitted with SLURM jobid" in second_log.read_text()

        sr.wait_for(submitted_the_fourth_job, 300, f"the 4th job's submission ({second_log})")
        gate.open()  # 2 GPUs: the 4th job runs once a gated job ends
        assert second.wait(timeout=420) == 0, second_log.read_text()[-4000:]
        log = second_log.read_text()
        assert "cleared Snakemake's lock" in log, log[-4000:]
        flying = re.search(r"in flight (\d) shard\(s\) held by 3 live job\(s\) of an earlier", log)
        assert flying and int(flying.group(1)) == 6, log[-4000:]
        assert "adopted: this run waits for them" in log
        for job_id in before:
            assert f"job {job_id} " in log
        assert log.count("has been submitted with SLURM jobid") == 1
        block = log[flying.start() :].split("\nSNAKEMAKE")[0].split("\nBuilding DAG")[0]
        print(f"\n--- second invocation, in flight ---\n{block}", file=sys.stderr)
        assert sr.squeue_of(workdir) == []  # nothing of the run left queued
        assert (run_dir / "report" / "coverage.png").exists()
    finally:
        sr.scancel_workdir(workdir)
    per_shard = sr.jobs_per_shard(workdir)
    print(f"SLURM jobs per shard: {dict(sorted(per_shard.items()))}", file=sys.stderr)
    assert per_shard == dict.fromkeys(range(SHARDS), 1)
    assert ledger_counts(tmp_path / "ledger") == dict.fromkeys(range(SHARDS), 1)
    assert main(["verify", "--run-dir", str(run_dir), "--complete"]) == 0


def test_a_stale_claim_does_not_block_its_shard_and_a_live_one_does(cluster, tmp_path):
    configfile = sr.demo(tmp_path, total_shards=SHARDS)
    assert main(["plan", "--configfile", str(configfile)]) == 0
    run_dir = tmp_path / "demo" / "run"
    held_job = subprocess.run(  # pending forever (held): alive until cancelled
        ["sbatch", "--parsable", "--hold", "-t", "5", "--wrap", "true"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    ).stdout.strip()  # fmt: skip
    path = claims.claim_path(run_dir, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    on_node = replace(claims.for_this_process(0), host="node-elsewhere", slurm_job_id=held_job)
    submitter = inflight.Submitter(
        workdir=str(tmp_path), snakefile=str(sr.REPO / "Snakefile"), cluster=True
    )
    try:
        path.write_bytes(on_node.to_bytes())
        refused = sr.shardwise("classify-shard", "--run-dir", str(run_dir), "--shard", "0",
                               "--no-progress")  # fmt: skip
        assert refused.returncode == 1
        assert f"shard 0 is claimed by SLURM job {held_job} on node-elsewhere" in refused.stderr
        assert list(inflight.find(run_dir, submitter).shards) == [0]
    finally:
        subprocess.run(["scancel", held_job], check=False)
    sr.wait_for(
        lambda: held_job not in {j["id"] for j in sr.squeue_of(tmp_path)},
        60,
        "the cancelled job to leave the queue",
    )
    flight = inflight.find(run_dir, submitter)  # plan time: the shard is not in flight
    assert (flight.shards, flight.stale_claims) == ({}, (0,))
    with claims.held(run_dir, 0) as mine:  # job time: what classify-shard does first
        assert claims.read_claim(path).token == mine.token
    assert not path.exists()
