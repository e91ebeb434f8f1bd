"""A Snakemake main process killed with SIGKILL: the same command, run again, finishes the run.

The demo (8 shards, K=2: 4 SLURM jobs) runs with `--jobs 3` on the 2 (fake) GPUs
of the test cluster, each shard job holding its claim at a test gate
(``shardwise.classify.gate``) until the test opens it, then labelling for real:

1. the first invocation submits 3 jobs: 2 RUNNING (each at the gate), 1 PENDING; it is
   killed with SIGKILL (its jobs keep running, as after a lost login node);
2. the same command, run again with no ``--unlock`` and ``--jobs 4``, clears the dead
   process's lock, adopts the 6 shards of those jobs (3 of its 4 job slots: adopted jobs
   count against ``jobs``) and submits the 4th job at once;
3. the pending adopted job is cancelled (an admin's scancel): its shards are submitted
   again at once (group ``classify_adopted``: never grouped with shards that wait for
   nothing), while the two other adopted jobs still hold the gate; the cause is on the
   console; then the gate opens, and it completes the run (report) in the same
   invocation: `verify --complete` passes.

Counted from sacct (the `--target-jobs` of every sbatch from the workflow's directory)
and from the shards' own journals: every file labelled once; the 4th job's shards in one
SLURM job each; every adopted shard in two: its adopted job, then its own once that
ended (a minimal CPU job that finds the shard's files marked where the adopted job
finished them, or the retry of the cancelled one's).
Also: a stale claim (its job cancelled) does not block its shard; a live one does.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import replace

import pytest
import slurmrun as sr
from e2e import Gate, gated_shardwise

from shardwise.cli.main import main
from shardwise.planner import inflight
from shardwise.run import claims, journal

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
    before = {j["id"]: j["state"] for j in sr.squeue_of(workdir)}
    (pending,) = [job_id for job_id, state in before.items() if state == "PENDING"]
    cmd = [*cmd, "--jobs", "4"]  # the later --jobs wins: 3 adopted jobs + 1 slot
    try:
        second_log = tmp_path / "second.log"
        second = subprocess.Popen(cmd, env=env, stdout=second_log.open("w"),
                                  stderr=subprocess.STDOUT)  # fmt: skip

        def submitted(count: int):  # the event: it has planned, then submitted
            def seen() -> bool:
                assert second.poll() is None, second_log.read_text()[-4000:]
                return second_log.read_text().count("has been submitted with SLURM jobid") >= count

            return seen

        sr.wait_for(submitted(1), 300, f"the 4th job's submission ({second_log})")
        # an adopted job ends (cancelled while pending): its shards are retried at once,
        # while the two other adopted jobs still hold the gate
        subprocess.run(["scancel", pending], check=True)
        sr.wait_for(submitted(2), 300, f"the cancelled job's shards again ({second_log})")
        assert len(gate.waiting()) == 2  # the running adopted jobs have not ended
        gate.open()  # 2 GPUs: the new jobs run once a gated job ends
        assert second.wait(timeout=420) == 0, second_log.read_text()[-4000:]
        log = second_log.read_text()
        assert "cleared Snakemake's lock" in log, log[-4000:]
        flying = re.search(r"in flight (\d) shard\(s\) held by 3 live job\(s\) of an earlier", log)
        assert flying and int(flying.group(1)) == 6, log[-4000:]
        assert "adopted: this run waits for them" in log
        for job_id in before:
            assert f"job {job_id} " in log
        cancelled = rf"adopted job {pending} \(shards [\d,-]+\) ended in partition \S+ \(CANCELLED"
        assert re.search(cancelled, log), log[-4000:]
        retried = re.search(
            r"submitted with SLURM jobid \d+ \(log: [^)]*group_classify_adopted", log
        )
        assert retried, log[-4000:]  # the adopted shards go in a group of their own
        block = log[flying.start() :].split("\nSNAKEMAKE")[0].split("\nBuilding DAG")[0]
        print(f"\n--- second invocation, in flight ---\n{block}", file=sys.stderr)
        assert sr.squeue_of(workdir) == []  # nothing of the run left queued
        assert (run_dir / "report" / "coverage.png").exists()
    finally:
        sr.scancel_workdir(workdir)
    per_shard = sr.jobs_per_shard(workdir)
    print(f"SLURM jobs per shard: {dict(sorted(per_shard.items()))}", file=sys.stderr)
    assert sorted(per_shard.values()) == [1] * (SHARDS - 6) + [2] * 6
    for shard in range(SHARDS):  # every finished file kept: labelled once
        lines = journal.journal_path(run_dir, shard).read_text().splitlines()
        files = Counter(journal.Line.from_json(line, "journal").file for line in lines)
        assert files and max(files.values()) == 1, (shard, files)
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
