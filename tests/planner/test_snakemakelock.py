"""Snakemake's lock left by a dead main process of the run is cleared; no other lock is."""

import os
import subprocess
from dataclasses import replace

from shardwise.planner import snakemakelock
from shardwise.run import claims

HERE = claims.hostname()


def submitter(tmp_path, **over):
    base = claims.Submitter(
        workdir=str(tmp_path), snakefile="Snakefile", host=HERE, pid=os.getpid(),
        started_at="2026-12-06T05:00:00+00:00",
    )  # fmt: skip
    return replace(base, **over)


def lock(tmp_path, n, kind, *paths):
    folder = tmp_path / ".snakemake" / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{n}.{kind}.lock"
    path.write_text("".join(f"{p}\n" for p in paths))
    return path


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_lock_of_a_dead_main_process_is_cleared_with_one_line(tmp_path):
    run_dir = tmp_path / "run"
    ours = [
        lock(tmp_path, 0, "input", tmp_path / "corpus" / "a.jsonl"),
        lock(tmp_path, 0, "output", "run/shards/0.done", run_dir / "report" / "coverage.png"),
    ]
    theirs = lock(tmp_path, 1, "output", tmp_path / "other-run" / "shards" / "0.done")
    gone = submitter(tmp_path, pid=dead_pid())
    said = snakemakelock.clear_stale(run_dir, submitter(tmp_path), gone)
    assert said == [
        "note: cleared Snakemake's lock (1 file(s) in .snakemake/locks) that the main process "
        f"of this run left when it died (pid {gone.pid} on {HERE}, started "
        "2026-12-06T05:00:00+00:00): no --unlock needed"
    ]
    assert not ours[1].exists()
    assert ours[0].exists()  # it names no path of this run (the input lock of another DAG)
    assert theirs.exists()


def test_a_live_process_keeps_its_lock(tmp_path):
    path = lock(tmp_path, 0, "output", tmp_path / "run" / "shards" / "0.done")
    live = subprocess.Popen(["sleep", "30"])
    try:
        alive = submitter(tmp_path, pid=live.pid, process=claims.process_identity(live.pid))
        assert snakemakelock.clear_stale(tmp_path / "run", submitter(tmp_path), alive) == []
    finally:
        live.kill()
        live.wait()
    assert path.exists()


def test_a_reused_pid_is_not_taken_for_the_dead_process(tmp_path):
    path = lock(tmp_path, 0, "output", tmp_path / "run" / "shards" / "0.done")
    reused = submitter(tmp_path, pid=os.getppid(), process="another-boot:1")
    assert snakemakelock.clear_stale(tmp_path / "run", submitter(tmp_path), reused) != []
    assert not path.exists()


def test_a_lock_of_another_host_or_an_unknown_process_is_left_with_advice(tmp_path):
    path = lock(tmp_path, 0, "output", tmp_path / "run" / "shards" / "0.done")
    elsewhere = submitter(tmp_path, host="login2", pid=1234)
    (said,) = snakemakelock.clear_stale(tmp_path / "run", submitter(tmp_path), elsewhere)
    assert "left by pid 1234 on login2" in said and "which cannot be checked from here" in said
    assert said.endswith("if that process is gone, run the same command with --unlock, then again")
    (said,) = snakemakelock.clear_stale(tmp_path / "run", submitter(tmp_path), None)
    assert "a process the run directory does not name" in said
    assert path.exists()


def test_no_lock_no_word(tmp_path):
    assert snakemakelock.clear_stale(tmp_path / "run", submitter(tmp_path), None) == []


def test_the_lock_of_a_main_process_whose_slurm_job_ended_is_cleared_on_any_host(tmp_path):
    path = lock(tmp_path, 0, "output", tmp_path / "run" / "shards" / "0.done")
    launcher = submitter(tmp_path, host="node7", pid=1234, slurm_job_id="41")
    asked = []

    def ended(job_id):
        asked.append(job_id)
        return "COMPLETED"

    (said,) = snakemakelock.clear_stale(
        tmp_path / "run", submitter(tmp_path, slurm_job_id="42"), launcher, job_state=ended
    )
    assert asked == ["41"]
    assert said == (
        "note: cleared Snakemake's lock (1 file(s) in .snakemake/locks) that the main process "
        "of this run left when its SLURM job 41 ended (COMPLETED) (pid 1234 on node7, started "
        "2026-12-06T05:00:00+00:00): no --unlock needed"
    )
    assert not path.exists()


def test_a_slurm_job_squeue_no_longer_lists_has_ended_and_a_live_one_keeps_its_lock(tmp_path):
    path = lock(tmp_path, 0, "output", tmp_path / "run" / "shards" / "0.done")
    launcher = submitter(tmp_path, host="node7", pid=1234, slurm_job_id="41")
    for state in ("RUNNING", "PENDING", None):  # live, or squeue did not answer
        (said,) = snakemakelock.clear_stale(
            tmp_path / "run", submitter(tmp_path), launcher, job_state=lambda _id, s=state: s
        )
        assert "which cannot be checked from here" in said
    assert path.exists()
    (said,) = snakemakelock.clear_stale(
        tmp_path / "run", submitter(tmp_path), launcher, job_state=lambda _id: ""
    )
    assert "its SLURM job 41 ended (no longer listed)" in said
    assert not path.exists()
    path = lock(tmp_path, 0, "output", tmp_path / "run" / "shards" / "0.done")
    (said,) = snakemakelock.clear_stale(  # its processes ended; SLURM runs the epilog
        tmp_path / "run", submitter(tmp_path), launcher, job_state=lambda _id: "COMPLETING"
    )
    assert "its SLURM job 41 ended (COMPLETING)" in said
