"""The real SLURM cluster for the ``slurm`` tests, started by ``tests/slurm/cluster.sh``.

``slurm_cluster`` (session): starts the cluster (installing Debian's slurm, munge
and mariadb on first use), or finds it running. When it cannot start: the test
FAILS if ``SHARDWISE_REQUIRE_SLURM=1`` (CI, as root), else it is skipped with the
reason. At the end, a cluster this session started is stopped unless another
pytest session is inside ``exclusive()``; one that was already running is left.

``slurm_cluster.exclusive()``: a context manager that holds an exclusive lock
(other pytest sessions on this machine wait) and makes sure the cluster is up.
QOS caps count all of root's jobs, so runs that check them must not overlap.

``slurm_qos_cap(n)``: a QOS ``cap<n>`` with ``MaxSubmitJobsPerUser=n`` that root may
use (``sbatch --qos=cap<n>``, or ``--shardwise-qos cap<n>`` for Snakemake).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CLUSTER_SH = HERE / "cluster.sh"
#: Seconds the whole start may take (a fresh machine: apt-get update + install).
START_TIMEOUT = 600


@dataclass(frozen=True)
class SlurmCluster:
    """What the tests need to know about the running cluster."""

    cluster_sh: Path
    account: str = "shardwise"
    partitions: tuple[str, ...] = ("ice-gpu", "coe-gpu", "ice-bw-gpu")
    gpus_per_node: int = 2
    start_output: str = ""

    @property
    def state_dir(self) -> Path:
        return Path(os.environ.get("SHARDWISE_SLURM_STATE", "/var/lib/shardwise-slurm"))

    @property
    def log_dir(self) -> Path:
        """slurmctld.log, slurmd.log, slurmdbd.log (kept across restarts)."""
        return self.state_dir / "log"

    @contextlib.contextmanager
    def exclusive(self) -> Generator[None, None, None]:
        """Hold the tests' lock; (re)start the cluster if another session stopped it."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with (self.state_dir / "tests.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            proc = _start()
            if proc.returncode != 0:
                pytest.fail(f"cluster.sh start failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
            yield


def _required() -> bool:
    return os.environ.get("SHARDWISE_REQUIRE_SLURM") == "1"


def _unavailable(reason: str) -> None:
    if _required():
        pytest.fail(f"SLURM cluster required (SHARDWISE_REQUIRE_SLURM=1) but {reason}")
    pytest.skip(f"no SLURM cluster: {reason}")


def _start() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CLUSTER_SH), "start"],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )


def _status() -> bool:
    try:
        proc = subprocess.run(
            ["bash", str(CLUSTER_SH), "status"],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    if not sys.platform.startswith("linux"):
        _unavailable("not Linux")
    if os.geteuid() != 0:
        _unavailable("cluster.sh needs root (it starts the daemons and apt-installs them)")
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        _unavailable("neither SLURM nor apt-get is installed")
    was_running = _status()
    t0 = time.monotonic()
    try:
        proc = _start()
    except subprocess.TimeoutExpired:
        _unavailable(f"cluster.sh start did not finish in {START_TIMEOUT} s")
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        _unavailable(f"cluster.sh start exited {proc.returncode}:\n{output[-3000:]}")
    print(f"SLURM cluster up in {time.monotonic() - t0:.1f} s\n{proc.stdout}", file=sys.stderr)
    cluster = SlurmCluster(cluster_sh=CLUSTER_SH, start_output=output)
    yield cluster
    if was_running:
        return
    with (cluster.state_dir / "tests.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another session is using the cluster: leave it running
        subprocess.run(
            ["bash", str(CLUSTER_SH), "stop"], capture_output=True, timeout=120, check=False
        )


def _sacctmgr(*args: str) -> str:
    proc = subprocess.run(
        ["sacctmgr", "-i", "-n", *args], capture_output=True, text=True, timeout=60, check=False
    )
    return proc.stdout + proc.stderr


@pytest.fixture(scope="session")
def slurm_qos_cap(slurm_cluster: SlurmCluster) -> Callable[[int], str]:
    """A factory: ``slurm_qos_cap(3)`` -> ``"cap3"``, usable by root."""

    def make(n: int) -> str:
        name = f"cap{n}"
        existing = _sacctmgr("list", "qos", f"name={name}", "format=name")
        if name not in existing.split():
            out = _sacctmgr("add", "qos", name, f"MaxSubmitJobsPerUser={n}")
            if name not in _sacctmgr("list", "qos", f"name={name}", "format=name").split():
                pytest.fail(f"could not create QOS {name}: {out}")
        _sacctmgr("modify", "qos", name, "set", f"MaxSubmitJobsPerUser={n}")
        _sacctmgr("modify", "user", "root", "set", f"qos+={name}")
        assocs = _sacctmgr("list", "assoc", "user=root", "format=qos%200")
        if name not in assocs.replace(",", " ").split():
            pytest.fail(f"root has no access to QOS {name}: {assocs}")
        return name

    return make
