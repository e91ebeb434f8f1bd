"""The hidden maintenance window, as an ordinary user under PrivateData (issues 21, 30).

The test cluster gets ``PrivateData=accounts,jobs,reservations,usage,users`` (binding
only ordinary users, never root or SlurmUser) and an ordinary user made with
``useradd``. Root creates a maintenance reservation starting OFFSET minutes from now;
the user runs the demo (8 shards: 2 jobs of 4, one per fake GPU) on the production
profile with its own resources (4 CPUs, 32000 MB, 1 GPU per job) and a 240-minute
walltime per shard, so every job pends with ``ReqNodeNotAvail, Reserved for
maintenance``; ``sbatch --test-only`` then adds 16 h for them (docs/cluster.md) and
cannot see the window. As that user:

* the reservation is invisible (``scontrol show reservation`` lists nothing);
* ``shardwise cluster status`` locates the window blind: its row "ends before the
  window" says about OFFSET minutes, within a few, and starts now; the advice names
  ``shardwise cluster retime`` with that limit and never says the wait is not about time;
* ``shardwise cluster retime --max-minutes N`` lowers the queued jobs in place, they
  start before the window, the run completes, ``shardwise verify --complete`` is OK;
* no job of the user's is left held or changed beyond the lowered limit, and after a
  ``kill -9`` of ``cluster status`` in the middle of its search the next one leaves
  the queue as it was (25 min); another user's jobs run and pend beside (70 min).

Then a matrix of the search alone (``walltime_probe.locate_window``, as the user, plain
sleeping jobs instead of a run): 1, 4 and 8 CPUs per job, 1 and 6 pending jobs, another
user's jobs running and pending or not, windows 25 and 70 minutes ahead, and one cell
where ``--test-only``'s step shows (method ``inferred``). In every cell the inferred
start is within 3 minutes of the real one, nothing is left queued, and the user's jobs
keep their priority, limit and state.

Two offsets. The venv, the interpreter it links to, the repository and the run's folder
must be readable by that user: the test opens the folders above them (o+x) for the
test's length.
"""

from __future__ import annotations

import contextlib
import json
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

from shardwise.slurm import command

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

USER = "swplain"
OTHER = "swother"  # another ordinary user, whose jobs run and pend beside the run's
PROBES = "shardwise-window-probe"
RESERVATION = "sw_hidden_maint"
PRIVATE = "accounts,jobs,reservations,usage,users"
SHARD_MINUTES = 240


@pytest.fixture(scope="module")
def ordinary_user(slurm_cluster) -> Iterator[str]:
    """The cluster with PrivateData on and an ordinary user in account shardwise."""
    with slurm_cluster.exclusive():
        for args in (("add-user", USER), ("add-user", OTHER), ("private-data", PRIVATE)):
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


def _user_argv(argv: tuple[str, ...] | list[str], path: Path | None = None) -> list[str]:
    first = f"{path}:" if path is not None else ""
    env = {
        "PATH": f"{first}{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
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


def _user_jobs(user: str = USER) -> list[dict[str, str]]:
    """The user's jobs as squeue shows them (id, state, reason, time limit)."""
    proc = subprocess.run(
        ["squeue", "-h", "-u", user, "-O", "JobID:|,State:|,Reason:|,TimeLimit:|"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    rows = []
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 4:
            rows.append({"id": parts[0], "state": parts[1], "reason": parts[2], "limit": parts[3]})
    return rows


def _reserve(offset: int) -> datetime:
    """A maintenance reservation on every node from ``offset`` minutes on; its start."""
    _scontrol("delete", f"reservation={RESERVATION}", check=False)
    _scontrol(
        "create", "reservation", f"reservationname={RESERVATION}",
        f"starttime=now+{offset}minutes", "duration=120", "nodes=ALL",
        "flags=maint,ignore_jobs", "users=root",
    )  # fmt: skip
    start = re.search(r"StartTime=(\S+)", _scontrol("show", "reservation", RESERVATION).stdout)
    return datetime.fromisoformat(start.group(1))


def _job_state(user: str) -> dict[str, tuple[str, ...]]:
    """Each of ``user``'s jobs as root sees it: priority, limit, state, accrue time."""
    out = _scontrol("show", "job", "-o", check=False).stdout
    keys = ("Priority", "TimeLimit", "JobState", "AccrueTime", "EligibleTime")
    jobs = {}
    for line in out.splitlines():
        fields = command.key_values(line)
        mine = fields.get("UserId", "").startswith(f"{user}(") and fields.get("JobName") != PROBES
        if mine and fields.get("JobState") in ("PENDING", "RUNNING"):
            jobs[fields["JobId"]] = tuple(fields.get(k, "") for k in keys)
    return jobs


def _unchanged(before: dict[str, tuple[str, ...]], after: dict[str, tuple[str, ...]]) -> bool:
    """The same jobs with the same priority, limit and state; a queue-age time SLURM had
    set is still set (a hold and release resets it to Unknown). The scheduler may set one
    meanwhile on its own first pass."""
    if before.keys() != after.keys():
        return False
    for job_id, was in before.items():
        now = after[job_id]
        times = all(b in ("Unknown", a) for b, a in zip(was[3:], now[3:], strict=True))
        if was[:3] != now[:3] or not times:
            return False
    return True


def _probes_queued() -> list[str]:
    proc = subprocess.run(["squeue", "-h", "-n", PROBES, "-t", "PD,R,CF", "-o", "%i"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return proc.stdout.split()


def _salloc_running() -> bool:
    """A window probe (salloc) is running on this machine: the event to kill status on."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if b"salloc\x00--immediate=1" in cmdline.read_bytes():
                return True
    return False


def _others_jobs() -> None:
    """Another user's jobs: one running (it ends before any window), one pending."""
    for args in (["-c", "1", "-t", "20", "--wrap", "sleep 45"],
                 ["-c", "2", "--gres=gpu:1", "-t", "600", "--wrap", "sleep 60"]):  # fmt: skip
        proc = subprocess.run(
            ["runuser", "-u", OTHER, "--", "sbatch", "-p", "ice-gpu", "--mem=100",
             "-o", "/dev/null", "-D", "/tmp", *args],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("offset", [25, 70])
def test_a_hidden_window_is_located_and_retime_starts_the_jobs_before_it(ordinary_user, offset):
    window = _reserve(offset)
    with _users_folder() as base:
        demo = _shardwise("demo", str(base / "demo"), cwd=base)
        assert demo.returncode == 0, demo.stderr[-3000:]
        config = yaml.safe_load((base / "demo" / "config.yaml").read_text())
        config["inference"]["device"] = "cpu"  # fake GPUs, CPU torch: on purpose
        config["resources"] = {"classify": {"runtime": SHARD_MINUTES}}
        # the operator's path: status, then retime (walltime.adapt, which would lower the
        # jobs by itself, has its own tests: tests/slurm/test_adapt.py)
        config["walltime"] = {"adapt": False}
        configfile = base / "config.yaml"
        configfile.write_text(yaml.safe_dump(config, sort_keys=False))
        shutil.chown(configfile, USER, USER)
        run_dir = base / "demo" / "run"
        if offset == 70:
            _others_jobs()
        # 2 jobs of 4 shards on the 2 GPUs, with the production profile's resources: one
        # wave, so every job can start before the window (a job queued behind another
        # would start later, with less time left)
        production = ("classify:gpu=1", "classify:cpus_per_task=4", "classify:mem_mb=32000")
        extra = ("--jobs", "4", "--group-components", "classify=4", "--set-resources", *production)
        if offset == 25:  # one partition, as production's profile asks: --test-only is blind
            one = ("slurm_partition='ice-gpu'", "slurm_account='shardwise'", "mem_mb=500",
                   "cpus_per_task=1", "runtime=10")  # fmt: skip
            extra += ("--default-resources", *one)
        cmd = sr.snakemake(base, configfile, sr.PROFILE, sr.PROFILE_CI, extra=extra)
        log = base / "snakemake.log"
        with log.open("w") as out:
            run = subprocess.Popen(_user_argv(cmd), cwd=base, stdout=out, stderr=subprocess.STDOUT)
        try:
            jobs = sr.wait_for(
                lambda: [j for j in _user_jobs() if "Reserved for maintenance" in j["reason"]],
                240, "the run's jobs to pend behind the hidden window",
            )  # fmt: skip
            sr.wait_for(lambda: all(sr.planned(j["id"]) for j in _user_jobs()), 240,
                        "a backfill pass over the run's jobs")  # fmt: skip
            hidden = _as_user("scontrol", "show", "reservation", cwd=base)
            assert RESERVATION not in hidden.stdout  # PrivateData hides it from this user
            before = _job_state(USER)
            if offset == 25:
                _kill_status_mid_search(run_dir, base)
            status = _shardwise("cluster", "status", "--run-dir", str(run_dir),
                                "--format", "json", cwd=base)  # fmt: skip
            assert _probes_queued() == [] and _unchanged(before, _job_state(USER))
            doc = sr.json_doc(status)
            probe = doc["walltime_probe"]
            rows = [r for r in probe["rows"] if r["label"] == "ends before the window"]
            assert len(rows) == 1, status.stdout
            [row] = rows
            located = probe["located"]
            if offset == 25:  # --test-only adds 16 h for the run's own jobs: allocations
                assert located["method"] == "allocated", located
                assert row["source"].startswith("inferred: a 1-CPU job ending before"), row
            assert row["starts_now"] is True, row
            real = (window - datetime.fromisoformat(doc["generated_at"])).total_seconds() / 60
            assert abs((row["minutes"] + 1) - real) <= 3, (row, real)  # within a few minutes
            inferred = datetime.fromisoformat(located["start"])
            assert abs((inferred - window).total_seconds()) <= 180, (located, window)
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
            after = _job_state(USER)
            for job_id, (priority, _, _, accrue, eligible) in before.items():
                if job_id in after:  # still pending: only the limit changed
                    assert after[job_id][0] == priority and after[job_id][3:] == (accrue, eligible)
            print(f"--- cluster retime ---\n{retimed.stdout}", file=sys.stderr)
            assert run.wait(timeout=600) == 0, log.read_text()[-4000:]
        finally:
            # runuser's child runs as the user: killing runuser alone would orphan it
            subprocess.run(["pkill", "-KILL", "-u", USER], check=False, capture_output=True)
            run.wait()
            subprocess.run(["scancel", "-u", USER], check=False, capture_output=True)
            subprocess.run(["scancel", "-u", OTHER], check=False, capture_output=True)
        verify = _shardwise("verify", "--run-dir", str(run_dir), "--complete", cwd=base)
        assert verify.returncode == 0, verify.stdout[-3000:]
        assert datetime.now() < window  # every job started (and ended) before the window
        assert not any(j["state"] == "PENDING" and "Held" in j["reason"] for j in _user_jobs())
    _scontrol("delete", f"reservation={RESERVATION}", check=False)


def _kill_status_mid_search(run_dir: Path, base: Path) -> None:
    """``kill -9`` a ``cluster status`` in the middle of a window probe: a ``salloc``
    first on its PATH says it started (the event), waits until told to go on, then runs
    the real one, orphaned by then, as a probe of a killed status would be."""
    wrappers, started, go = base / "bin", base / "salloc-started", base / "salloc-go"
    wrappers.mkdir()
    real = shutil.which("salloc")
    script = f"#!/bin/sh\ntouch {started}\nwhile [ ! -e {go} ]; do sleep 0.05; done\n"
    (wrappers / "salloc").write_text(script + f'exec {real} "$@"\n')
    (wrappers / "salloc").chmod(0o755)
    argv = _user_argv([sys.executable, "-m", "shardwise.cli", "cluster", "status",
                       "--run-dir", str(run_dir)], path=wrappers)  # fmt: skip
    status = subprocess.Popen(argv, cwd=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)  # fmt: skip
    try:
        sr.wait_for(lambda: started.exists() or status.poll() is not None, 120,
                    "a window probe of cluster status")  # fmt: skip
        ended = status.poll() is not None
        assert not ended, f"cluster status ended before any window probe:\n{status.stdout.read()}"
        subprocess.run(["pkill", "-KILL", "-u", USER, "-f", "shardwise.cli cluster status"],
                       check=False)  # fmt: skip
    finally:
        status.wait()
        go.touch()  # the orphaned probe goes on, as salloc would after a kill -9


#: (CPUs per job, pending jobs, another user's jobs, minutes to the window, job limit).
#: The last cell's short limits keep --test-only's delay (8 x 80 / 16 = 40 min) before
#: the window's end: its answers step, and nothing is submitted.
MATRIX = [
    *((cpus, pending, (cpus + pending) % 2 == 1, 25 if cpus != 4 else 70, 540)
      for cpus in (1, 4, 8) for pending in (1, 6)),
    (1, 1, False, 70, 80),
]  # fmt: skip


def _idle() -> bool:
    """No job of anyone in the queue (completing ones included), no CPU allocated."""
    queued = subprocess.run(["squeue", "-h"], capture_output=True, text=True, check=False)
    cpus = subprocess.run(["sinfo", "-h", "-o", "%C"], capture_output=True, text=True, check=False)
    allocated = (cpus.stdout.split("/") or ["0"])[0].strip()
    return not queued.stdout.strip() and allocated in ("0", "")


def test_the_window_is_located_whatever_the_jobs_ask_for(ordinary_user):
    """The search alone, cell by cell: within 3 minutes, nothing left behind. Each cell
    starts on an idle node (an earlier test's cancelled jobs may still be completing: a
    node they hold would hide the window from every 1-CPU request)."""
    rows = []
    for user in (USER, OTHER):
        subprocess.run(["scancel", "-u", user], check=False, capture_output=True)
    sr.wait_for(_idle, 120, "an idle node before the first cell")
    for cpus, pending, others, offset, limit in MATRIX:
        window = _reserve(offset)
        try:
            if others:
                _others_jobs()
            for _ in range(pending):
                proc = subprocess.run(
                    ["runuser", "-u", USER, "--", "sbatch", "-p", "ice-gpu", "-c", str(cpus),
                     "--gres=gpu:1", "--mem=1000", "-t", str(limit), "-o", "/dev/null",
                     "-D", "/tmp", "--wrap", "sleep 600"],
                    capture_output=True, text=True, check=False,
                )  # fmt: skip
                assert proc.returncode == 0, proc.stderr
            first = sr.wait_for(
                lambda: [j for j in _user_jobs() if "Reserved for maintenance" in j["reason"]],
                60, "the user's jobs to pend behind the window",
            )[0]  # fmt: skip
            # the event: SLURM's backfill pass has planned them (before it, salloc
            # --immediate is refused for "insufficient priority", and status says the
            # answers are provisional)
            sr.wait_for(lambda: all(sr.planned(j["id"]) for j in _user_jobs()), 120,
                        "a backfill pass over the user's jobs")  # fmt: skip
            before = _job_state(USER)
            code = (
                "import json, sys; from dataclasses import asdict;"
                "from shardwise.ops.walltime import probe as walltime_probe;"
                "from shardwise.slurm import queries;"
                f"d = queries.job_detail({first['id']!r}).value;"
                f"asked = walltime_probe.probe_minutes({limit}, 1);"
                "a = walltime_probe.locate_window(d, asked, 20);"
                "print(json.dumps(asdict(a)))"
            )
            searched = _as_user(sys.executable, "-c", code, cwd=Path("/tmp"), timeout=120)
            assert searched.returncode == 0, searched.stderr
            answer = json.loads(searched.stdout)
            found = answer["value"]
            queue = subprocess.run(["squeue", "-h", "-o", "%i %u %T %C %l %r"],
                                   capture_output=True, text=True, check=False).stdout  # fmt: skip
            assert found is not None, (cpus, pending, others, offset, answer["problem"], queue)
            off = (datetime.fromisoformat(found["start"]) - window).total_seconds() / 60
            rows.append((cpus, pending, others, offset, limit, found["method"],
                         found["start"][11:16], f"{window:%H:%M:%S}", round(off, 1),
                         found["calls"], found["seconds"]))  # fmt: skip
            assert abs(off) <= 3, rows[-1]
            assert found["method"] == ("inferred" if limit < 100 else "allocated"), rows[-1]
            assert _probes_queued() == [], rows[-1]
            assert _unchanged(before, _job_state(USER)), rows[-1]  # priority, limit, state, age
        finally:
            for user in (USER, OTHER):
                subprocess.run(["scancel", "-u", user], check=False, capture_output=True)
            sr.wait_for(_idle, 120, "the cell's jobs to go, the node idle")
    head = "cpus pending others offset limit method inferred real off_min calls seconds"
    print("\n" + head + "\n" + "\n".join(" ".join(map(str, r)) for r in rows), file=sys.stderr)
    _scontrol("delete", f"reservation={RESERVATION}", check=False)
