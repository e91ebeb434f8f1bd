"""One launcher generation, on this machine: a real child process in place of Snakemake,
the queue's answers monkeypatched onto the module's own names (tests/slurm/test_slurm_launch.py
runs the chain on the real cluster)."""

import io
import os
import signal
import sys
import threading

import pytest
from slurm_samples import job

from shardwise.ops.launch import generation
from shardwise.run import launch, markers
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


def test_a_complete_workflow_cancels_the_successor_and_ends_the_chain(tmp_path, monkeypatch, queue):
    done = tmp_path / "shards"
    code = f"import pathlib; d = pathlib.Path({str(done)!r}); d.mkdir(); (d / '0.done').touch()"
    gen = start(tmp_path, monkeypatch, code)
    assert gen.run() == 0
    assert queue.cancelled == ["41", "101"]  # the stray first, then its own successor
    assert any("--dependency=afterany:40,singleton" in o for o in queue.submitted[0])
    assert steps(tmp_path) == [Step.STARTED, Step.SUCCESSOR, Step.COMPLETE]
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
    assert steps(tmp_path)[-1] == Step.PROGRESS and queue.pending == ["102"]  # goes on


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
    assert "because its walltime is near" in last.text and "successor job 101 adopts" in last.text
    assert queue.pending == ["101"]


def test_a_stopped_chain_starts_nothing(tmp_path, monkeypatch, queue):
    gen = start(tmp_path, monkeypatch, "raise SystemExit(3)")
    launch.save(tmp_path, launch.load(tmp_path).stopped("t"))
    assert gen.run() == 0
    assert steps(tmp_path) == [Step.STOPPED] and queue.submitted == [] and queue.pending == []
