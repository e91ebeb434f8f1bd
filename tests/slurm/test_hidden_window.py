"""The hidden maintenance window, as an ordinary user under PrivateData (issue 21).

The test cluster gets ``PrivateData=accounts,jobs,reservations,usage,users`` (binding
only ordinary users, never root or SlurmUser) and an ordinary user made with
``useradd``. Root creates a maintenance reservation starting OFFSET minutes from now;
the user runs the demo (8 shards: 2 jobs of 4, one per fake GPU) on the production
profile with a 240-minute walltime per shard, so every job pends with
``ReqNodeNotAvail, Reserved for maintenance``. As that user:

* the reservation is invisible (``scontrol show reservation`` lists nothing);
* ``shardwise cluster status`` locates the window blind: its row "ends before the
  window" says about OFFSET minutes, within a few, and starts now; the advice names
  ``shardwise cluster retime`` with that limit and never says the wait is not about time;
* ``shardwise cluster retime --max-minutes N`` lowers the queued jobs in place, they
  start before the window, the run completes, ``shardwise verify --complete`` is OK.

Two offsets. The venv, the interpreter it links to, the repository and the run's folder
must be readable by that user: the test opens the folders above them (o+x) for the
test's length.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import slurmrun as sr
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

USER = "swplain"
RESERVATION = "sw_hidden_maint"
PRIVATE = "accounts,jobs,reservations,usage,users"
SHARD_MINUTES = 240


@pytest.fixture(scope="module")
def ordinary_user(slurm_cluster) -> Iterator[str]:
    """The cluster with PrivateData on and an ordinary user in account shardwise."""
    with slurm_cluster.exclusive():
        for args in (("add-user", USER), ("private-data", PRIVATE)):
            proc = subprocess.run(
                ["bash", str(slurm_cluster.cluster_sh), *args],
                capture_output=True, text=True, timeout=120, check=False, env=sr.env(),
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr[-3000:]
        venv = Path(sys.executable).parent.parent
        opened = _open_path_for_others([sr.REPO, venv, Path(sys.base_prefix)])  # its python too
        try:
            yield USER
        finally:
            _scontrol("delete", f"reservation={RESERVATION}", check=False)
            subprocess.run(
                ["bash", str(slurm_cluster.cluster_sh), "private-data", "none"],
                capture_output=True, text=True, timeout=120, check=False, env=sr.env(),
            )  # fmt: skip
            for path, mode in opened:
                path.chmod(mode)


def _open_path_for_others(paths: list[Path]) -> list[tuple[Path, int]]:
    """o+x on every folder above ``paths`` (and o+rx on them) that lacks it; the old modes."""
    changed: list[tuple[Path, int]] = []
    for path in paths:
        for folder in [path.resolve(), *path.resolve().parents]:
            mode = folder.stat().st_mode
            want = stat.S_IXOTH | (stat.S_IROTH if folder == path.resolve() else 0)
            if mode & want != want:
                changed.append((folder, stat.S_IMODE(mode)))
                folder.chmod(stat.S_IMODE(mode) | want)
    return changed


def _scontrol(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["scontrol", *args], capture_output=True, text=True, check=False)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def _as_user(*argv: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        _user_argv(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def _user_argv(argv: tuple[str, ...] | list[str]) -> list[str]:
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": f"/home/{USER}",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
    }
    return ["runuser", "-u", USER, "--", "env", "-i",
            *(f"{k}={v}" for k, v in env.items()), *argv]  # fmt: skip


def _shardwise(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return _as_user(sys.executable, "-m", "shardwise.cli", *args, cwd=cwd)


@contextlib.contextmanager
def _users_folder() -> Iterator[Path]:
    """A folder the ordinary user owns (pytest's tmp_path is root's, mode 700)."""
    path = Path(tempfile.mkdtemp(prefix="shardwise-hidden-"))
    path.chmod(0o755)
    shutil.chown(path, USER, USER)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _user_jobs() -> list[dict[str, str]]:
    """The user's jobs as squeue shows them (id, state, reason, time limit)."""
    proc = subprocess.run(
        ["squeue", "-h", "-u", USER, "-O", "JobID:|,State:|,Reason:|,TimeLimit:|"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    rows = []
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 4:
            rows.append({"id": parts[0], "state": parts[1], "reason": parts[2], "limit": parts[3]})
    return rows


@pytest.mark.parametrize("offset", [25, 70])
def test_a_hidden_window_is_located_and_retime_starts_the_jobs_before_it(ordinary_user, offset):
    _scontrol("delete", f"reservation={RESERVATION}", check=False)
    _scontrol(
        "create", "reservation", f"reservationname={RESERVATION}",
        f"starttime=now+{offset}minutes", "duration=120", "nodes=ALL",
        "flags=maint,ignore_jobs", "users=root",
    )  # fmt: skip
    start = re.search(r"StartTime=(\S+)", _scontrol("show", "reservation", RESERVATION).stdout)
    window = datetime.fromisoformat(start.group(1))
    with _users_folder() as base:
        demo = _shardwise("demo", str(base / "demo"), cwd=base)
        assert demo.returncode == 0, demo.stderr[-3000:]
        config = yaml.safe_load((base / "demo" / "config.yaml").read_text())
        config["inference"]["device"] = "cpu"  # fake GPUs, CPU torch: on purpose
        config["resources"] = {"classify": {"runtime": SHARD_MINUTES}}
        configfile = base / "config.yaml"
        configfile.write_text(yaml.safe_dump(config, sort_keys=False))
        shutil.chown(configfile, USER, USER)
        run_dir = base / "demo" / "run"
        # 2 jobs of 4 shards on the 2 GPUs: one wave, so every job can start before the
        # window (a job queued behind another would start later, with less time left)
        cmd = sr.snakemake(base, configfile, sr.PROFILE, sr.PROFILE_CI,
                           extra=("--jobs", "4", "--group-components", "classify=4"))  # fmt: skip
        log = base / "snakemake.log"
        with log.open("w") as out:
            run = subprocess.Popen(_user_argv(cmd), cwd=base, stdout=out, stderr=subprocess.STDOUT)
        try:
            jobs = sr.wait_for(
                lambda: [j for j in _user_jobs() if "Reserved for maintenance" in j["reason"]],
                240, "the run's jobs to pend behind the hidden window",
            )  # fmt: skip
            # the event: SLURM's backfill pass has planned them (before it, test-only
            # answers are provisional, and status says so)
            sr.wait_for(lambda: all(sr.planned(j["id"]) for j in _user_jobs()), 240,
                        "a backfill pass over the run's jobs")  # fmt: skip
            hidden = _as_user("scontrol", "show", "reservation", cwd=base)
            assert RESERVATION not in hidden.stdout  # PrivateData hides it from this user

            status = _shardwise("cluster", "status", "--run-dir", str(run_dir),
                                "--format", "json", cwd=base)  # fmt: skip
            doc = sr.json_doc(status)
            probe = doc["walltime_probe"]
            rows = [r for r in probe["rows"] if r["label"] == "ends before the window"]
            assert len(rows) == 1, status.stdout
            [row] = rows
            assert row["source"].startswith("inferred: a small job ending before"), row
            assert row["starts_now"] is True, row
            found_at = datetime.fromisoformat(doc["generated_at"])
            real = (window - found_at).total_seconds() / 60
            assert abs((row["minutes"] + 1) - real) <= 3, (row, real)  # within a few minutes
            assert "not about time" not in probe["advice"]
            advised = re.search(
                rf"`shardwise cluster retime --run-dir {re.escape(str(run_dir))} "
                r"--max-minutes (\d+)`",
                probe["advice"],
            )
            assert advised, probe["advice"]
            limit = int(advised.group(1))  # the window row's, or a probe's that starts now
            assert row["minutes"] <= limit < real, (limit, real, probe["advice"])
            table = _shardwise("cluster", "status", "--run-dir", str(run_dir), cwd=base)
            print(f"\n--- cluster status, hidden window in {offset} min (at {window:%H:%M:%S}) "
                  f"---\n{table.stdout}", file=sys.stderr)  # fmt: skip

            retimed = _shardwise("cluster", "retime", "--run-dir", str(run_dir),
                                 "--max-minutes", str(limit), cwd=base)  # fmt: skip
            assert retimed.returncode == 0, retimed.stdout + retimed.stderr
            lowered = re.findall(r"^lowered job (\d+) ", retimed.stdout, re.MULTILINE)
            assert set(lowered) >= {j["id"] for j in jobs}, retimed.stdout
            print(f"--- cluster retime ---\n{retimed.stdout}", file=sys.stderr)
            assert run.wait(timeout=600) == 0, log.read_text()[-4000:]
        finally:
            # runuser's child runs as the user: killing runuser alone would orphan it
            subprocess.run(["pkill", "-KILL", "-u", USER], check=False, capture_output=True)
            run.wait()
            subprocess.run(["scancel", "-u", USER], check=False, capture_output=True)
        verify = _shardwise("verify", "--run-dir", str(run_dir), "--complete", cwd=base)
        assert verify.returncode == 0, verify.stdout[-3000:]
        assert datetime.now() < window  # every job started (and ended) before the window
    _scontrol("delete", f"reservation={RESERVATION}", check=False)
