"""One launcher generation, on this machine: a real child process in place of Snakemake,
the queue's answers monkeypatched onto the module's own names (tests/slurm/test_slurm_launch.py
runs the chain on the real cluster)."""

import io
import os
import signal
import subprocess
import sys
import threading

import pytest
from slurm_samples import job

from shardwise.ops.launch import generation
from shardwise.run import claims, launch, markers
from shardwise.run.launch import Launch, Step
from shardwise.slurm.queries import Answer


class Queue:
    """The chain's jobs as squeue would list them, and what was submitted and cancelled."""

    def __init__(self, pending=()):
        self.pending = list(pending)
        self.submitted: list[list[str]] = []
        self.cancelled: list[str] = []

    def jobs(self, name, **_kw):
        return [job(i, "PENDING", name=name) for i in self.pending]

    def submit(self, options, wrap, **_kw):
        self.submitted.append(list(options))
        self.pending.append(str(100 + len(self.submitted)))
        return Answer(self.pending[-1])

    def cancel(self, ids, **_kw):
        self.cancelled += list(ids)
        self.pending = [i for i in self.pending if i not in ids]
        return Answer(True)


@pytest.fixture
def queue(monkeypatch):
    q = Queue(pending=["41"])  # a stray queued launcher (a requeue, a double submission)
    monkeypatch.setattr(generation, "chain_jobs", q.jobs)
    monkeypatch.setattr(generation.control, "submit_batch", q.submit)
    monkeypatch.setattr(generation.control, "cancel", q.cancel)
    return q


def start(tmp_path, monkeypatch, code: str) -> generation.Generation:
    """A generation whose 'snakemake' is ``python -c code``."""
    req = Launch(name="shardwise-launch-t", workdir=str(tmp_path), python=sys.executable,
                 snakemake_args=("-c", code), time_minutes=60, stop_before_seconds=300,
                 cpus=1, mem_mb=1000, created_at="t")  # fmt: skip
    launch.save(tmp_path, req)
    monkeypatch.setattr(generation.request, "snakemake_command",
                        lambda r: [r.python, *r.snakemake_args])  # fmt: skip
    return generation.Generation(run_dir=tmp_path, job_id="40", out=io.StringIO())


def steps(tmp_path):
    return [e.step for e in launch.events(tmp_path)]


def test_a_complete_workflow_cancels_the_queued_launchers_and_ends_the_chain(
    tmp_path, monkeypatch, queue
):
    done = tmp_path / "shards"
    code = f"import pathlib; d = pathlib.Path({str(done)!r}); d.mkdir(); (d / '0.done').touch()"
    gen = start(tmp_path, monkeypatch, code)
    assert gen.run() == 0
    # the queue was topped up to two spares (41 already waited), then both cancelled
    assert len(queue.submitted) == 1 and queue.cancelled == ["41", "101"]
    assert "--dependency=singleton" in queue.submitted[0]
    assert steps(tmp_path) == [Step.STARTED, Step.SUCCESSOR, Step.COMPLETE]
    assert launch.events(tmp_path)[1].detail == "41,101"
    assert markers.done_shards(tmp_path) == {0}


def test_a_failure_with_no_progress_ends_the_chain_and_one_with_progress_goes_on(
    tmp_path, monkeypatch, queue
):
    gen = start(tmp_path, monkeypatch, "raise SystemExit(1)")
    assert gen.run() == 1
    assert steps(tmp_path)[-1] == Step.ENDED and queue.pending == []
    (tmp_path / "launch" / "chain.jsonl").unlink()
    queue.pending = []
    (tmp_path / "shards").mkdir()
    done = tmp_path / "shards" / "3.done"
    code = f"import pathlib; pathlib.Path({str(done)!r}).touch(); raise SystemExit(1)"
    gen = start(tmp_path, monkeypatch, code)
    assert gen.run() == 1
    assert steps(tmp_path)[-1] == Step.PROGRESS and len(queue.pending) == 2  # goes on


def test_the_walltime_signal_kills_snakemake_and_leaves_the_successor(tmp_path, monkeypatch, queue):
    started = tmp_path / "started"
    code = f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(600)"
    gen = start(tmp_path, monkeypatch, code)

    def signal_once_it_runs():
        while not started.exists():  # the event: the child has started
            threading.Event().wait(0.01)
        os.kill(os.getpid(), signal.SIGUSR1)  # SLURM's --signal=B:USR1@N

    threading.Thread(target=signal_once_it_runs, daemon=True).start()
    assert gen.run() == 0
    assert gen.child is not None and gen.child.returncode == -signal.SIGKILL  # never SIGINT
    last = launch.events(tmp_path)[-1]
    assert last.step == Step.STOPPING
    assert "because its walltime is near" in last.text
    assert "the next launcher (job 41, queued) adopts them" in last.text
    assert queue.pending == ["41", "101"]


def test_a_stopped_chain_starts_nothing(tmp_path, monkeypatch, queue):
    gen = start(tmp_path, monkeypatch, "raise SystemExit(3)")
    launch.save(tmp_path, launch.load(tmp_path).stopped("t"))
    assert gen.run() == 0
    assert steps(tmp_path) == [Step.STOPPED] and queue.submitted == [] and queue.pending == []


def test_more_queued_launchers_than_the_spares_are_cut_to_the_oldest(tmp_path, monkeypatch, queue):
    """A doubly submitted chain would fork: the newest queued ones beyond the spares go."""
    queue.pending = ["41", "44", "43"]
    gen = start(tmp_path, monkeypatch, "raise SystemExit(1)")
    gen.run()
    assert queue.cancelled[0] == "44" and queue.submitted == []
    assert launch.events(tmp_path)[1].detail == "41,43"


def test_snakemake_dies_with_its_launcher_even_by_sigkill(tmp_path):
    """``kill -9`` of the launcher (the OOM killer, ``scancel --batch --signal=KILL``) takes
    its Snakemake along: no orphan drives the run from no job (PR_SET_PDEATHSIG)."""
    child_pid = tmp_path / "child.pid"
    script = f"""
import io, sys
from pathlib import Path
from shardwise.ops.launch import generation
from shardwise.run import launch
from shardwise.run.launch import Launch
code = ("import os, pathlib, time; "
        "pathlib.Path({str(child_pid)!r}).write_text(str(os.getpid())); time.sleep(600)")
req = Launch(name="shardwise-launch-t", workdir={str(tmp_path)!r}, python=sys.executable,
             snakemake_args=("-c", code), time_minutes=60, stop_before_seconds=300, cpus=1,
             mem_mb=1000, created_at="t")
launch.save(Path({str(tmp_path)!r}), req)
generation.request.snakemake_command = lambda r: [r.python, *r.snakemake_args]
generation.chain_jobs = lambda name, **kw: []
generation.control.submit_batch = lambda options, wrap, **kw: generation.control.Answer(None, "no")
gen = generation.Generation(run_dir=Path({str(tmp_path)!r}), job_id="40", out=io.StringIO())
gen.run()
"""
    launcher = subprocess.Popen([sys.executable, "-c", script])
    try:
        while not child_pid.exists() or not child_pid.read_text():  # the event: it runs
            assert launcher.poll() is None, "the launcher ended before its snakemake started"
            threading.Event().wait(0.02)
        pid = int(child_pid.read_text())
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
        gone = threading.Event()
        for _ in range(500):  # the kernel's SIGKILL reaches the child at once; 10 s at most
            if not claims.process_alive(pid, None):
                gone.set()
                break
            gone.wait(0.02)
        assert gone.is_set(), f"snakemake (pid {pid}) outlived its launcher"
    finally:
        launcher.kill()
