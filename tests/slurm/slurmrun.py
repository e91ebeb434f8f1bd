"""Helpers shared by the SLURM tests of cluster check/status and restarts."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "slurm"
PROFILE_CI = REPO / "tests" / "slurm" / "profile-ci"
SCHEMAS = REPO / "docs" / "schemas"


def env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The submitting environment: the venv first on PATH (jobs inherit it), no SLURM_*."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    out["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{out.get('PATH', '')}"
    out["PYTHONUNBUFFERED"] = "1"
    out.update(extra or {})
    return out


def demo(base: Path, *, walltime: dict | None = None, total_shards: int | None = None) -> Path:
    """Write the demo under ``base``; returns its config file."""
    base.mkdir(parents=True, exist_ok=True)
    subprocess.run(["shardwise", "demo", str(base / "demo")], check=True, capture_output=True,
                   env=env())  # fmt: skip
    config = yaml.safe_load((base / "demo" / "config.yaml").read_text())
    # The test cluster's GPUs are fake (SLURM still exports CUDA_VISIBLE_DEVICES), and the
    # venv's torch is the CPU build: `device: auto` would rightly refuse to fall back to
    # the CPU in a job that was given a GPU, so these runs ask for the CPU on purpose.
    config["inference"]["device"] = "cpu"
    # the job keeper and the adoption look at the run's jobs every 2 s, not 60: the tests'
    # jobs take seconds
    config["failures"] = {"watch_seconds": 2}
    if walltime:
        config["walltime"] = walltime
    if total_shards:
        config["sharding"]["total_shards"] = total_shards
    path = base / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def overlay(directory: Path, values: dict) -> Path:
    """A profile directory holding ``values`` (used after the others)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(values))
    return directory


def snakemake(workdir: Path, configfile: Path, *profiles: Path, extra: tuple = ()) -> list[str]:
    """The snakemake command line of the repo's workflow with ``profiles`` in order."""
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(configfile)]  # fmt: skip
    for p in profiles:
        cmd += ["--profile", str(p)]
    return cmd + list(extra)


def shardwise(*args: str, extra_env: dict[str, str] | None = None, timeout: float = 120):
    """Run the `shardwise` CLI (in the repo, where profiles/ is); CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "shardwise.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env(extra_env),
        check=False,
    )


def run(cmd: list[str], timeout: float = 240, extra_env: dict[str, str] | None = None):
    """Run a snakemake to its end; CompletedProcess with text output."""
    return subprocess.run(
        cmd, capture_output=True, text=True, env=env(extra_env), timeout=timeout, check=False
    )


def planned(job_id: str) -> bool:
    """Whether SLURM's backfill pass has looked at the job (``Scheduler=Backfill``), or
    it pends no longer: before that pass ``sbatch --test-only`` answers are provisional."""
    shown = subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=False
    ).stdout
    return "Scheduler=Backfill" in shown or "JobState=PENDING" not in shown


def squeue_of(workdir: Path) -> list[dict[str, str]]:
    """root's jobs that squeue lists with this submit directory."""
    proc = subprocess.run(
        ["squeue", "-h", "-u", "root", "-O", "JobID:|,State:|,Reason:|,WorkDir:|"],
        capture_output=True,
        text=True,
        check=False,
    )
    rows = []
    for line in proc.stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 4 and parts[3] == str(workdir):
            rows.append({"id": parts[0], "state": parts[1], "reason": parts[2]})
    return rows


def sacct_of(workdir: Path) -> list[dict[str, str]]:
    """sacct's records of every job submitted from ``workdir`` today."""
    start = f"{datetime.now() - timedelta(days=1):%Y-%m-%dT%H:%M}"
    fields = "JobIDRaw,State,WorkDir,SubmitLine"
    proc = subprocess.run(
        ["sacct", "-X", "-P", "-n", "-S", start, "-u", "root", "-o", fields],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    keys = fields.split(",")
    rows = [dict(zip(keys, line.split("|", 3), strict=True)) for line in proc.stdout.splitlines()]
    return [r for r in rows if r["WorkDir"] == str(workdir)]


def jobs_per_shard(workdir: Path) -> Counter:
    """How many SLURM jobs were submitted for each shard (from each sbatch's --target-jobs)."""
    counts: Counter = Counter()
    for job in sacct_of(workdir):
        m = re.search(r"--target-jobs (.*?) --allowed-rules", job["SubmitLine"])
        if m:
            counts.update(int(s) for s in re.findall(r"classify:shard=(\d+)", m.group(1)))
    return counts


def wait_for(predicate: Callable[[], object], timeout: float, what: str, every: float = 0.5):
    """Poll until ``predicate()`` is truthy; its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def interrupt(proc: subprocess.Popen, timeout: float = 90) -> None:
    """Ctrl-C a snakemake: it cancels its SLURM jobs and exits."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def scancel_workdir(workdir: Path, wait: float = 120) -> None:
    """Cancel whatever jobs submitted from ``workdir`` are left (test cleanup), and wait
    (at most ``wait`` s) until squeue lists none of them: a cluster restarted by the next
    test while their steps still end leaves a stepd SLURM cannot end, and drains the node
    ("Kill task failed")."""
    ids = [j["id"] for j in squeue_of(workdir)]
    if ids:
        subprocess.run(["scancel", *ids], check=False, capture_output=True)
    deadline = time.monotonic() + wait
    while ids and squeue_of(workdir) and time.monotonic() < deadline:
        time.sleep(0.5)
    _kill_strays(workdir)


def _kill_strays(workdir: Path) -> None:
    """Kill what a job step left running under ``workdir`` without its slurmstepd.

    The test cluster tracks processes by ancestry (proctrack/linuxproc): a step process
    that caught SIGTERM and outlived its slurmstepd (a requeue, a node set DOWN) is
    orphaned and never killed, where a real node's cgroup would be. Left alone it sits
    in a later test's process table for the rest of the session.
    """
    needle = str(workdir).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def json_doc(proc: subprocess.CompletedProcess) -> dict:
    """The JSON a `--format json` command printed (with its stderr on failure)."""
    try:
        return json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"not JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
