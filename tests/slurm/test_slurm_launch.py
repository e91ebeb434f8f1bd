"""``shardwise launch``: the workflow's main process renews itself as a chain of SLURM jobs.

One wave on the real cluster (the demo, 8 shards, K=2, 3-minute launchers stopped 90 s
before their walltime; the shard jobs hold at a test gate after their first file, so that
the launchers end while they run):

1. generation 1 submits shard jobs, then its walltime signal stops its Snakemake with
   SIGKILL: the shard jobs live on;
2. its successor starts by itself, clears the lock the killed Snakemake left (its SLURM job
   has ended) and adopts the live shard jobs; that launcher's own process is then killed
   (``scancel --batch --signal=KILL``, what kill -9, the OOM killer or a crash does): on
   this cluster's ``proctrack/linuxproc`` its Snakemake, in a session of its own, would
   outlive the job; it must die with it within seconds;
3. the next launcher is cancelled in its first second (the moment a launcher used to
   queue its successor: the chain ended there); a spare queued before it started takes over;
4. that one clears the locks and adopts; then the node goes down under it and the shard
   jobs (``State=DOWN``, then back): SLURM requeues the shard jobs, and the launcher ends
   ``NODE_FAIL``;
5. the next one starts, clears that lock and adopts; the gate opens; the launcher that
   sees every target done cancels the queued ones and the chain ends, complete.

No command is given after ``launch``. Checked: every file labelled (``verify
--complete``), each file labelled once (the shards' journals: a group job that Snakemake
gave a shard another job held refuses it by its claim), at least five generations,
never two launchers at once (sacct's start and end of each), nothing left queued.
Also: ``launch --stop`` ends a chain and leaves its shard jobs running, as it says.
"""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
import slurmrun as sr
from e2e import Gate, gated_shardwise

from shardwise.cli.main import main
from shardwise.planner import snakemakelock
from shardwise.run import claims, journal
from shardwise.run import launch as record

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

SHARDS = 8


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    with slurm_cluster.exclusive():
        yield slurm_cluster


def launch_cmd(configfile: Path, *extra: str) -> list[str]:
    snakemake_args = ["--snakefile", str(sr.REPO / "Snakefile"), "--configfile", str(configfile),
                      "--profile", str(sr.PROFILE), "--profile", str(sr.PROFILE_CI),
                      "--jobs", "2", "--group-components", "classify=2"]  # fmt: skip
    return [sys.executable, "-m", "shardwise.cli", "launch", "--time", "3", "--stop-before", "90",
            "--cpus", "1", "--mem-mb", "500", "--account", "shardwise", *extra,
            "--", *snakemake_args]  # fmt: skip


def steps(run_dir: Path) -> list[record.ChainEvent]:
    return record.events(run_dir)


def started(run_dir: Path) -> list[str]:
    return [e.job_id for e in steps(run_dir) if e.step == record.Step.STARTED]


def log_of(run_dir: Path, job_id: str) -> str:
    path = run_dir / record.LOG_DIR / f"{job_id}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def chain_queue(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True,
                         text=True, check=False).stdout  # fmt: skip
    return out.split()


def launcher_spans(name: str) -> list[tuple[str, str, datetime, datetime]]:
    """(job id, state, start, end) of every launcher of the chain that ran, from sacct."""
    out = subprocess.run(
        ["sacct", "-X", "-P", "-n", "--name", name, "-S", "now-1days", "-o",
         "JobIDRaw,State,Start,End"], capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    spans = []
    for line in out.splitlines():
        job, state, start, end = line.split("|")
        if start not in ("", "None", "Unknown") and end not in ("", "None", "Unknown"):
            spans.append((job, state, datetime.fromisoformat(start), datetime.fromisoformat(end)))
    return sorted(spans, key=lambda s: s[2])


def _resumed(node: str) -> bool:
    """Ask SLURM to resume the node (refused while it still ends its jobs); True once it
    is in service again."""
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                   capture_output=True, check=False)  # fmt: skip
    state = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t"], capture_output=True,
                           text=True, check=False).stdout  # fmt: skip
    return bool(state.strip()) and not any(s in state for s in ("down", "drain", "fail"))


def adopted_in(run_dir: Path, job_id: str) -> bool:
    return "adopted: this run waits for them" in log_of(run_dir, job_id)


def holds_lock(workdir: Path, run_dir: Path, job_id: str) -> bool:
    """The Snakemake of launcher ``job_id`` holds its lock: ``claims/workflow.json`` names
    the job (the planner writes it after clearing a stale lock) and a lock file is there
    (Snakemake takes it after planning, before it submits): only then does a launcher that
    ends leave a lock for its successor to clear."""
    me = claims.Submitter.recorded(run_dir)
    locks = workdir / snakemakelock.LOCKS
    held = locks.is_dir() and any(p.name.endswith(".lock") for p in locks.iterdir())
    return me is not None and me.slurm_job_id == job_id and held


def test_a_campaign_under_launch_finishes_with_no_command_after_it(cluster, tmp_path):
    configfile = sr.demo(tmp_path, total_shards=SHARDS)
    workdir = tmp_path / "work"
    workdir.mkdir()
    run_dir = tmp_path / "demo" / "run"
    gate = Gate(tmp_path / "gate", after_files=1)
    env = gated_shardwise(tmp_path / "bin", tmp_path / "ledger", gate)
    name = record.chain_name(run_dir)
    try:
        launched = subprocess.run(launch_cmd(configfile), cwd=workdir, env=env, check=False,
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
        assert launched.returncode == 0, launched.stderr
        # 1-2: a launcher stopped at its walltime signal; its successor adopted the jobs
        sr.wait_for(gate.waiting, 300, "shard jobs at the gate")
        sr.wait_for(
            lambda: len(started(run_dir)) >= 2 and adopted_in(run_dir, started(run_dir)[-1]),
            420,
            f"a successor that adopted the live shard jobs ({steps(run_dir)})",
        )
        first, second = started(run_dir)[:2]
        assert any(e.step == record.Step.STOPPING and e.job_id == first for e in steps(run_dir))
        assert f"its SLURM job {first} ended" in log_of(run_dir, second)
        sr.wait_for(lambda: holds_lock(workdir, run_dir, second), 120, f"job {second}'s lock")
        # 2b: the adopting launcher's own process is killed (kill -9, the OOM killer): its
        # Snakemake, in a session of its own, must not outlive the job (PR_SET_PDEATHSIG)
        holder = claims.Submitter.recorded(run_dir)
        assert holder is not None and holder.slurm_job_id == second
        subprocess.run(["scancel", "--batch", "--signal=KILL", second], check=True)
        sr.wait_for(lambda: second not in chain_queue(name), 120, f"job {second} to end")
        ended = time.monotonic()
        sr.wait_for(
            lambda: not claims.process_alive(holder.pid, holder.process), 30,
            f"job {second}'s snakemake (pid {holder.pid}) to die with it",
        )  # fmt: skip
        outlived = time.monotonic() - ended
        # 3: the next launcher is cancelled in its first second; a spare takes over
        cancelled = sr.wait_for(
            lambda: started(run_dir)[2] if len(started(run_dir)) >= 3 else None, 420,
            f"the launcher after the killed one ({steps(run_dir)})", every=0.05,
        )  # fmt: skip
        subprocess.run(["scancel", cancelled], check=True)
        cancelled_after = datetime.now() - datetime.fromisoformat(
            next(e.at for e in steps(run_dir) if e.job_id == cancelled and e.step == "started")
        )
        sr.wait_for(
            lambda: len(started(run_dir)) >= 4 and adopted_in(run_dir, started(run_dir)[3]),
            420,
            f"a spare to take over from the cancelled launcher ({steps(run_dir)})",
        )
        spare = started(run_dir)[3]
        sr.wait_for(lambda: holds_lock(workdir, run_dir, spare), 120, f"job {spare}'s lock")
        # 4: the node under the adopting launcher (and the shard jobs) goes down, then back
        node = socket.gethostname().split(".")[0]
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DOWN",
                        "Reason=shardwise-test"], check=True)  # fmt: skip
        sr.wait_for(lambda: _resumed(node), 120, f"node {node} back in service")
        sr.wait_for(
            lambda: len(started(run_dir)) >= 5 and adopted_in(run_dir, started(run_dir)[4]),
            420,
            f"the launcher after the node failure to adopt ({steps(run_dir)})",
        )
        fifth = started(run_dir)[4]
        assert f"its SLURM job {spare} ended (NODE_FAIL)" in log_of(run_dir, fifth)
        gate.open()
        sr.wait_for(
            lambda: any(e.step == record.Step.COMPLETE for e in steps(run_dir)),
            600,
            f"the chain's end ({steps(run_dir)})",
        )
        sr.wait_for(lambda: not chain_queue(name) and not sr.squeue_of(workdir), 120,
                    "nothing left queued")  # fmt: skip
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
        gate.open()  # gated steps end at once
        sr.scancel_workdir(workdir)
        sr.scancel_workdir(tmp_path)
    events = steps(run_dir)
    spans = launcher_spans(name)
    print("\n--- the chain ---", file=sys.stderr)
    for e in events:
        print(f"{e.at} job {e.job_id or '-'} {e.step}: {e.text}", file=sys.stderr)
    for job, state, start, end in spans:
        print(f"launcher {job} {state} {start:%H:%M:%S}-{end:%H:%M:%S}", file=sys.stderr)
    print(f"snakemake outlived its SIGKILLed launcher job by {outlived:.1f} s; a launcher "
          f"was cancelled {cancelled_after.total_seconds():.1f} s after it started",
          file=sys.stderr)  # fmt: skip
    assert outlived < 10
    assert len(started(run_dir)) >= 5
    for (_j, _s, _start, end), (_k, _t, nxt, _e) in itertools.pairwise(spans):
        assert nxt >= end, f"two launchers at once: {spans}"
    for shard in range(SHARDS):  # every finished file kept: labelled once
        lines = journal.journal_path(run_dir, shard).read_text().splitlines()
        files = Counter(journal.Line.from_json(line, "journal").file for line in lines)
        assert files and max(files.values()) == 1, (shard, files)
    assert main(["verify", "--run-dir", str(run_dir), "--complete"]) == 0
    status = sr.shardwise("launch", "--status", "--run-dir", str(run_dir))
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"launcher chain of {run_dir}: complete"), status.stdout
    assert json.loads(record.launch_path(run_dir).read_text())["stopped_at"] is None


def test_launch_stop_ends_the_chain_and_leaves_the_shard_jobs_running(cluster, tmp_path):
    configfile = sr.demo(tmp_path, total_shards=SHARDS)
    workdir = tmp_path / "work"
    workdir.mkdir()
    run_dir = tmp_path / "demo" / "run"
    gate = Gate(tmp_path / "gate", after_files=1)
    env = gated_shardwise(tmp_path / "bin", tmp_path / "ledger", gate)
    name = record.chain_name(run_dir)
    try:
        launched = subprocess.run(launch_cmd(configfile), cwd=workdir, env=env, check=False,
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
        assert launched.returncode == 0, launched.stderr
        again = subprocess.run(launch_cmd(configfile), cwd=workdir, env=env, check=False,
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert again.returncode == 1
        assert f"a launcher chain of {run_dir} is live" in again.stderr
        sr.wait_for(lambda: len(gate.waiting()) >= 2, 300, "shard jobs at the gate")
        shard_jobs = {j["id"] for j in sr.squeue_of(workdir)} - set(chain_queue(name))
        stopped = sr.shardwise("launch", "--stop", "--run-dir", str(run_dir))
        assert stopped.returncode == 0, stopped.stderr
        print(f"\n--- launch --stop ---\n{stopped.stdout}", file=sys.stderr)
        assert "cancelled launcher job(s)" in stopped.stdout
        assert "shard job(s) keep running" in stopped.stdout
        for job_id in shard_jobs:
            assert job_id in stopped.stdout
        sr.wait_for(lambda: not chain_queue(name), 120, "the launchers to leave the queue")
        assert shard_jobs <= {j["id"] for j in sr.squeue_of(workdir)}  # still live
        status = sr.shardwise("launch", "--status", "--run-dir", str(run_dir))
        assert status.stdout.startswith(f"launcher chain of {run_dir}: stopped"), status.stdout
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
        gate.open()  # the shard jobs it left running end at once
        sr.scancel_workdir(workdir)
        sr.scancel_workdir(tmp_path)


def test_a_lock_left_in_a_slurm_job_that_ended_is_cleared(cluster, tmp_path):
    """The lock rule against the real squeue: a cancelled job is ended, a held one live."""

    def job(*options: str) -> str:
        return subprocess.run(["sbatch", "--parsable", *options, "-t", "5", "--wrap", "true"],
                              capture_output=True, text=True, check=True,
                              cwd=tmp_path).stdout.strip()  # fmt: skip

    held, cancelled = job("--hold"), job("--hold")
    subprocess.run(["scancel", cancelled], check=True)
    try:
        locks = tmp_path / ".snakemake" / "locks"
        locks.mkdir(parents=True)
        me = claims.Submitter(workdir=str(tmp_path), snakefile="Snakefile", host="login1", pid=1)
        for job_id, cleared in ((held, False), (cancelled, True)):
            (locks / "0.output.lock").write_text(f"{tmp_path / 'run' / 'shards' / '0.done'}\n")
            other = claims.Submitter(workdir=str(tmp_path), snakefile="Snakefile",
                                     host="node9", pid=7, slurm_job_id=job_id)  # fmt: skip
            (said,) = snakemakelock.clear_stale(tmp_path / "run", me, other)
            assert (f"its SLURM job {job_id} ended" in said) is cleared, said
            assert (locks / "0.output.lock").exists() is not cleared
    finally:
        subprocess.run(["scancel", held], check=False)
