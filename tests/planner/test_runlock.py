"""One top-level process per run directory; an orphan a killed launcher left (its SLURM
job ended, its Snakemake still holding the run) is ended on its own host and the lock
taken over, never refused as a second run. Real processes, SLURM's answer injected."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardwise.errors import RunMismatchError
from shardwise.planner import runlock
from shardwise.run import claims


def _holder(run_dir: Path) -> subprocess.Popen:
    """A process in a session of its own (as a launcher's Snakemake) holding the lock."""
    code = (
        "import sys; from pathlib import Path; from shardwise.planner.runlock import "
        f"lock_run_dir; lock_run_dir(Path({str(run_dir)!r})); print('locked', flush=True); "
        "sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "locked"  # the event: it holds the lock
    return proc


def _record(run_dir: Path, proc: subprocess.Popen, job: str) -> None:
    """``claims/workflow.json`` as the holder's planner wrote it, in launcher job ``job``."""
    claims.Submitter(
        workdir=str(run_dir.parent), snakefile="Snakefile", host=claims.hostname(),
        pid=proc.pid, process=claims.process_identity(proc.pid), slurm_job_id=job,
    ).record(run_dir)  # fmt: skip


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    (tmp_path / "run" / "claims").mkdir(parents=True)
    return tmp_path / "run"


def test_an_orphan_whose_launcher_job_ended_is_ended_and_the_lock_taken(run_dir: Path) -> None:
    holder = _holder(run_dir)
    try:
        _record(run_dir, holder, "77")
        said = runlock.lock_run_dir(run_dir, job_state=lambda job: "")  # 77: no longer listed
        assert holder.wait(timeout=30) == -9  # SIGKILL: its shard jobs are left to run
    finally:
        holder.kill()
    (line,) = said
    assert line.startswith(f"note: the run was held by pid {holder.pid} on {claims.hostname()}")
    assert "the main process of SLURM job 77 (no longer listed)" in line
    assert line.endswith("ended it (its shard jobs keep running and are adopted) and took over")
    assert f"pid {os.getpid()} on" in (run_dir / runlock.LOCK_FILE).read_text()


@pytest.mark.parametrize(
    ("job", "state"),
    [("77", "RUNNING"), ("77", None), (None, "")],
    ids=["its job runs", "squeue does not answer", "no SLURM job"],
)
def test_a_holder_that_is_no_orphan_is_refused_as_a_second_run(
    run_dir: Path, job: str | None, state: str | None
) -> None:
    holder = _holder(run_dir)
    try:
        _record(run_dir, holder, job)
        with pytest.raises(RunMismatchError, match=rf"is in use by pid {holder.pid} on "):
            runlock.lock_run_dir(run_dir, job_state=lambda _job: state)
        assert holder.poll() is None  # never touched
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_a_recorded_process_that_is_gone_is_no_orphan(run_dir: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _record(run_dir, gone, "77")
    assert runlock.orphan(run_dir, job_state=lambda job: "COMPLETED") is None
