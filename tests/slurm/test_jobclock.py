"""When a job began, by its processes' own clocks (``slurm/jobclock.py``)."""

import os
import time
from pathlib import Path

from shardwise.slurm import jobclock

TICKS = os.sysconf("SC_CLK_TCK")


def _proc(tmp_path: Path, boot: int, rows: dict[int, tuple[str, int, int]]) -> Path:
    """A fake ``/proc``: the boot time, and per pid (comm, parent, start in ticks)."""
    (tmp_path / "stat").write_text(f"cpu  1 2 3\nbtime {boot}\nprocesses 9\n")
    for pid, (comm, parent, start) in rows.items():
        (tmp_path / str(pid)).mkdir()
        fields = ["S", str(parent), *["0"] * 17, str(start), "0"]  # fields 3 .. 23
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")
    return tmp_path


def test_under_slurm_the_job_began_when_its_step_did(tmp_path, monkeypatch):
    """The earliest ancestor below slurmstepd (Snakemake's job step, then its shell): not
    this process, and nothing above the step daemon (slurmd started long before)."""
    proc = _proc(
        tmp_path,
        1000,
        {
            5: ("slurmd", 1, 0),
            7: ("slurmstepd", 5, 10 * TICKS),
            8: ("snakemake (job)", 7, 100 * TICKS),  # a comm with a space and parentheses
            9: ("bash", 8, 130 * TICKS),
            10: ("python", 9, 131 * TICKS),
        },
    )
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert jobclock.started_at(10, proc=proc) == 1000 + 100
    monkeypatch.delenv("SLURM_JOB_ID")
    assert jobclock.started_at(10, proc=proc) == 1000 + 131  # the local executor: its own


def test_where_proc_cannot_say_nothing_is_measured(tmp_path):
    assert jobclock.started_at(10, proc=tmp_path) is None
    proc = _proc(tmp_path, 1000, {})
    assert jobclock.started_at(10, proc=proc) is None  # the process is gone


def test_this_process_began_before_now():
    began = jobclock.started_at()
    assert began is not None and began <= time.time()
