"""The demo on a real SLURM cluster, through the production profile.

One Snakemake run (module fixture ``main_run``) is observed from outside and the
tests below check one property of it each; then a second run must submit nothing:

    snakemake --profile profiles/slurm --profile tests/slurm/profile-ci \\
        --jobs 3 --shardwise-qos cap3 --group-components classify=2 ...

- every shard ends done;
- grouping: ceil(shards / K) SLURM jobs completed, each asked for one GPU
  (sacct ReqTRES gres/gpu=1) and for the walltime computed by walltime.py for its
  K shards (sacct TimelimitRaw == the sum);
- the cap: QOS cap3 (MaxSubmitJobsPerUser=3) and `jobs` = 3: no sbatch refused,
  and squeue (sampled every 0.5 s) never shows more than 3 of our jobs queued or
  running;
- one running job is scancel-ed (while its shard stands at the test gate): the console
  and the shard's failure record name the cancel, it is retried (attempt 2) with the same
  walltime (only a stop at the walltime doubles it), and the run still ends complete;
- a rerun with everything done submits nothing.

The cluster has 2 (fake) GPUs, so at most 2 jobs run and the third pends.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from e2e import Gate

from shardwise.config import WalltimeSettings
from shardwise.planner.walltime import default_rate, minutes_for
from shardwise.run import failures

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "slurm"
PROFILE_CI = REPO / "tests" / "slurm" / "profile-ci"
K = 2  # shards per SLURM job
CAP = 3  # QOS MaxSubmitJobsPerUser, and Snakemake's --jobs
RUN_TIMEOUT = 480  # seconds; the run takes ~3 min on 2 cores
#: Walltime settings that make the computed runtimes differ per shard (the demo's
#: shards are ~15-115 kB: 3 to 24 minutes each) instead of all hitting min_minutes.
WALLTIME = {
    "default_mb_per_minute": 0.01,
    "safety_factor": 2,
    "min_minutes": 1,
    "max_minutes": 240,
}
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING"}


# ---------------------------------------------------------------- helpers
def _env() -> dict[str, str]:
    """The submitting environment: the venv first on PATH (jobs inherit it), no SLURM_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _snakemake_cmd(workdir: Path, configfile: Path, qos: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--profile",
        str(PROFILE),
        "--profile",
        str(PROFILE_CI),
        "--configfile",
        str(configfile),
        "--jobs",
        str(CAP),
        "--shardwise-qos",
        qos,
        "--group-components",
        f"classify={K}",
    ]


def _run_id(log: str) -> str | None:
    m = re.search(r"SLURM run ID: (\S+)", log)
    return m.group(1) if m else None


def _elapsed_s(text: str) -> int:
    """squeue %M ('5:03', '1:02:03', '2-01:02:03') in seconds."""
    days, _, rest = text.rpartition("-")
    seconds = 0
    for part in rest.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds + int(days or 0) * 86400


def _squeue() -> list[tuple[str, str, str, int]]:
    """(job id, name, state, elapsed s) of root's jobs that squeue lists."""
    proc = subprocess.run(
        ["squeue", "-h", "-u", "root", "-o", "%i|%j|%T|%M"],
        capture_output=True,
        text=True,
        check=False,
    )
    rows = []
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            rows.append((parts[0], parts[1], parts[2], _elapsed_s(parts[3])))
    return rows


def _sacct(job_name: str) -> list[dict[str, str]]:
    """sacct's records of the jobs named ``job_name`` (SubmitLine: the exact sbatch call)."""
    start = f"{datetime.now() - timedelta(days=1):%Y-%m-%dT%H:%M}"
    fields = "JobIDRaw,State,TimelimitRaw,ReqTRES,QOS,Partition,Account,SubmitLine"
    proc = subprocess.run(
        ["sacct", "-X", "-P", "-n", "-S", start, "--name", job_name, "-o", fields],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    keys = fields.split(",")
    # SubmitLine is last and may itself contain "|": split only the first fields
    return [
        dict(zip(keys, line.split("|", len(keys) - 1), strict=True))
        for line in proc.stdout.splitlines()
    ]


def _submitted(job: dict[str, str]) -> tuple[list[int], int]:
    """(shards, attempt) of a SLURM job, from the Snakemake command in its sbatch call."""
    line = job["SubmitLine"]
    m = re.search(r"--target-jobs (.*?) --allowed-rules", line)
    assert m, f"no --target-jobs in the sbatch call of job {job['JobIDRaw']}: {line}"
    shards = [int(s) for s in re.findall(r"classify:shard=(\d+)", m.group(1))]
    attempt = re.search(r"--attempt (\d+)", line)
    return shards, int(attempt.group(1)) if attempt else 1


@dataclass
class Observer:
    """Samples squeue every 0.5 s; scancels the first job whose shard stands at the gate
    (every shard job waits there until the gate opens: the cancel lands on a running
    job however fast the cluster is), then opens the gate."""

    log_path: Path
    gate: Gate
    samples: list[Counter] = field(default_factory=list)
    cancelled: str | None = None
    cancel_error: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)

    def _ours(self) -> list[tuple[str, str, str, int]]:
        run_id = _run_id(self.log_path.read_text(errors="replace"))
        if run_id is None:
            return []
        return [row for row in _squeue() if row[1] == run_id]

    def loop(self) -> None:
        while not self._stop.is_set():
            rows = self._ours()
            self.samples.append(Counter(state for _, _, state, _ in rows))
            if self.cancelled is None and (waiting := self._first_at_gate()):
                proc = subprocess.run(
                    ["scancel", waiting], capture_output=True, text=True, check=False
                )
                if proc.returncode == 0:
                    self.cancelled = waiting
                else:
                    self.cancel_error += proc.stderr
                self.gate.open()
            self._stop.wait(0.5)

    def _first_at_gate(self) -> str | None:
        """The SLURM job id of the first shard job that stands at the gate."""
        for path in sorted(self.gate.directory.glob("*.waiting")):
            _pid, _, job_id = path.read_text().strip().partition(" ")
            if job_id and job_id != "-":
                return job_id
        return None

    def stop(self) -> None:
        self._stop.set()
        self.gate.open()  # never leave a job waiting

    @property
    def max_active(self) -> int:
        return max((sum(n for s, n in c.items() if s in ACTIVE) for c in self.samples), default=0)

    @property
    def max_listed(self) -> int:
        return max((sum(c.values()) for c in self.samples), default=0)


def _run_snakemake(
    cmd: list[str], log_path: Path, timeout: float, extra_env: dict[str, str] | None = None
) -> int:
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**_env(), **(extra_env or {})}
        )
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGINT: Snakemake cancels its SLURM jobs (SIGTERM would make it wait forever)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    pytest.fail(f"snakemake ran past {timeout} s; log: {log_path}")


@dataclass
class MainRun:
    returncode: int
    log: str
    run_id: str
    workdir: Path
    configfile: Path
    run_dir: Path
    qos: str
    observer: Observer
    refusals_in_ctld_log: int
    wall_s: float

    def jobs(self) -> list[dict[str, str]]:
        """sacct's records of this run, once slurmdbd has every job's end."""
        deadline = time.monotonic() + 30
        while True:
            jobs = _sacct(self.run_id)
            settled = all(j["State"] not in ACTIVE | {"COMPLETING"} for j in jobs)
            if settled or time.monotonic() > deadline:
                return jobs
            time.sleep(1)

    def planned_shard_sizes(self) -> dict[int, int]:
        table = pq.read_table(self.run_dir / "plan.parquet", columns=["shard", "size"])
        sizes: dict[int, int] = {}
        for shard, size in zip(table["shard"].to_pylist(), table["size"].to_pylist(), strict=True):
            sizes[shard] = sizes.get(shard, 0) + size
        return sizes

    def expected_minutes(self, shards: list[int], attempt: int) -> int:
        sizes = self.planned_shard_sizes()
        limits = WalltimeSettings(**WALLTIME)
        rate = default_rate(limits)  # no .stats.json existed when the run started
        return sum(minutes_for(sizes[s], rate, limits, attempt) for s in shards)


def _refusals(cluster) -> int:
    log = cluster.log_dir / "slurmctld.log"
    if not log.exists():
        return 0
    return log.read_text(errors="replace").count("violates accounting/QOS policy")


# ---------------------------------------------------------------- the run
@pytest.fixture(scope="module")
def main_run(slurm_cluster, slurm_qos_cap, tmp_path_factory) -> Iterator[MainRun]:
    # other pytest sessions on this machine wait: the QOS cap counts all root's jobs
    with slurm_cluster.exclusive():
        yield _main_run(slurm_cluster, slurm_qos_cap, tmp_path_factory)


def _main_run(slurm_cluster, slurm_qos_cap, tmp_path_factory) -> MainRun:
    base = tmp_path_factory.mktemp("slurm-demo")
    demo = base / "demo"
    subprocess.run(["shardwise", "demo", str(demo)], check=True, capture_output=True, env=_env())
    config = yaml.safe_load((demo / "config.yaml").read_text())
    config["walltime"] = dict(WALLTIME)
    # the fake GPUs set CUDA_VISIBLE_DEVICES in each job and torch here is the CPU build:
    # device auto would (rightly) refuse to fall back to the CPU, so ask for it on purpose
    config["inference"]["device"] = "cpu"
    configfile = base / "config.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    workdir = base / "work"
    workdir.mkdir()
    qos = slurm_qos_cap(CAP)
    refusals_before = _refusals(slurm_cluster)

    log_path = base / "snakemake.log"
    log_path.touch()
    observer = Observer(log_path, Gate(base / "gate"))
    thread = threading.Thread(target=observer.loop, daemon=True)
    thread.start()
    t0 = time.monotonic()
    try:
        rc = _run_snakemake(
            _snakemake_cmd(workdir, configfile, qos), log_path, RUN_TIMEOUT, observer.gate.env()
        )
    finally:
        observer.stop()
        thread.join(timeout=10)
    wall = time.monotonic() - t0
    log = log_path.read_text(errors="replace")
    run_id = _run_id(log)
    assert run_id, f"no SLURM run ID in the log:\n{log[-3000:]}"
    print(f"slurm demo run: {wall:.0f} s, log {log_path}", file=sys.stderr)
    return MainRun(
        returncode=rc,
        log=log,
        run_id=run_id,
        workdir=workdir,
        configfile=configfile,
        run_dir=Path(config["run_dir"]),
        qos=qos,
        observer=observer,
        refusals_in_ctld_log=_refusals(slurm_cluster) - refusals_before,
        wall_s=wall,
    )


# ---------------------------------------------------------------- tests
def test_demo_ends_with_every_shard_done(main_run: MainRun) -> None:
    assert main_run.returncode == 0, main_run.log[-4000:]
    total = yaml.safe_load(main_run.configfile.read_text())["sharding"]["total_shards"]
    missing = [s for s in range(total) if not (main_run.run_dir / "shards" / f"{s}.done").exists()]
    assert not missing, f"shards not done: {missing}"
    from shardwise.cli.main import main as shardwise_main

    assert shardwise_main(["verify", "--run-dir", str(main_run.run_dir)]) == 0


def test_one_slurm_job_per_k_shards_with_one_gpu_and_summed_walltime(main_run: MainRun) -> None:
    planned = sorted(main_run.planned_shard_sizes())
    jobs = main_run.jobs()
    completed = [j for j in jobs if j["State"] == "COMPLETED"]
    assert len(completed) == math.ceil(len(planned) / K), jobs
    covered: list[int] = []
    for job in jobs:
        shards, attempt = _submitted(job)
        minutes = main_run.expected_minutes(shards, 1)  # a cancel's retry keeps the walltime
        sbatch = job["SubmitLine"].split(" --wrap=")[0].split()
        assert 1 <= len(shards) <= K, (job, shards)
        # what was asked: one GPU, the summed computed walltime (-t minutes) ...
        assert "--gpus=1" in sbatch, sbatch
        assert sbatch[sbatch.index("-t") + 1] == str(minutes), (sbatch, shards, attempt)
        # ... and what SLURM recorded
        assert "gres/gpu=1" in job["ReqTRES"].split(","), job
        assert int(job["TimelimitRaw"]) == minutes, (job, shards, attempt)
        assert job["QOS"] == main_run.qos, job
        assert job["Account"] == "shardwise", job
        assert job["Partition"] in {"ice-gpu", "coe-gpu", "ice-bw-gpu"}, job
        if job["State"] == "COMPLETED":
            covered += shards
    assert sorted(covered) == planned


def test_qos_cap_is_never_hit(main_run: MainRun) -> None:
    assert "QOSMaxSubmitJobPerUserLimit" not in main_run.log
    assert "sbatch failed" not in main_run.log
    assert main_run.refusals_in_ctld_log == 0
    obs = main_run.observer
    assert len(obs.samples) > 20, "squeue was hardly sampled"
    assert 0 < obs.max_active <= CAP, obs.samples
    # COMPLETING jobs no longer count toward MaxSubmitJobsPerUser; report them anyway
    print(f"max queued+running {obs.max_active}, max listed {obs.max_listed}", file=sys.stderr)


def test_scancelled_job_is_retried_and_run_completes(main_run: MainRun) -> None:
    obs = main_run.observer
    assert obs.cancelled, f"no running job was cancelled: {obs.cancel_error}"
    jobs = {j["JobIDRaw"]: j for j in main_run.jobs()}
    assert jobs[obs.cancelled]["State"].startswith("CANCELLED"), jobs[obs.cancelled]
    shards, attempt = _submitted(jobs[obs.cancelled])
    retries = [
        job_id
        for job_id, job in jobs.items()
        if job["State"] == "COMPLETED" and _submitted(job) == (shards, attempt + 1)
    ]
    assert retries, f"cancelled job {obs.cancelled} ({shards}) was not retried: {jobs}"
    for retry in retries:  # only a stop at the walltime doubles it
        assert jobs[retry]["TimelimitRaw"] == jobs[obs.cancelled]["TimelimitRaw"], jobs
    stopped = [r for s in shards for r in failures.records(main_run.run_dir, s)
               if r.slurm_job_id == obs.cancelled]  # fmt: skip
    assert [r.kind for r in stopped] == ["cancelled"], stopped
    said = "cancelled by a user or an admin (scancel; SLURM ended it before its limit"
    assert said in main_run.log, main_run.log[-3000:]
    print(f"\n--- the cancel, as the console said it ---\n{stopped[0].reason}", file=sys.stderr)
    assert main_run.returncode == 0


def test_rerun_with_everything_done_submits_nothing(main_run: MainRun) -> None:
    assert main_run.returncode == 0
    log_path = main_run.workdir.parent / "snakemake-rerun.log"
    rc = _run_snakemake(
        _snakemake_cmd(main_run.workdir, main_run.configfile, main_run.qos), log_path, 180
    )
    log = log_path.read_text(errors="replace")
    assert rc == 0, log[-3000:]
    assert "Nothing to be done" in log, log[-3000:]
    assert "has been submitted with SLURM jobid" not in log
    run_id = _run_id(log)
    if run_id:
        assert _sacct(run_id) == []
