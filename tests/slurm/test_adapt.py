"""A busy cluster before a hidden window: SLURM's own plan, and the workflow adapting (issue 38).

As the ordinary ``useradd`` user under ``PrivateData=accounts,jobs,reservations,usage,users``
(the fixture of test_hidden_window.py), with the production request (4 CPUs, 32000 MB,
1 GPU, 960 min):

* a matrix of the plan probe alone (``ops/walltime/plan_probe.probe``): another user's running
  jobs and runnable jobs pending ahead or not, the run's own pending jobs 1 or 6, windows
  near and far, one partition and a list. In every cell the limit it names really starts
  (a job of that shape and limit, submitted after the answer, runs at once), nothing of
  the probe is left queued, and the other user's jobs keep their limits;
* ``kill -9`` of ``cluster status`` and of the adapting workflow in the middle of a plan
  probe: the next ``cluster status`` leaves no probe queued, the user's jobs are as they
  were (never raised), no file is labelled twice;
* the campaign benchmark's smoke run (``bench/campaign.py``): the same campaign with the
  configured limit only and with ``walltime.adapt``, in one wave, no operator command.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import slurmrun as sr
import yaml
from test_hidden_window import (  # the same user, cluster settings and helpers
    OTHER,
    USER,
    _as_user,
    _reserve,
    _scontrol,
    _user_argv,
    _user_jobs,
    _users_folder,
    ordinary_user,  # noqa: F401 - the module's fixture
)

from shardwise.ops.cluster.asking import adapting_workflow

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

PLAN_PROBES = "shardwise-plan-probe"
REQUEST = ["-c", "4", "--gres=gpu:1", "--mem=32000", "-o", "/dev/null", "-D", "/tmp"]


def _sbatch(user: str, *args: str) -> str:
    proc = subprocess.run(
        ["runuser", "-u", user, "--", "sbatch", "--parsable", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _others(running_minutes: int) -> dict[str, str]:
    """Another user's load: a job of 4 CPUs and a GPU ending in ``running_minutes``, and
    three runnable 8-CPU jobs pending ahead; their limits by job id."""
    base = ["-p", "ice-gpu", "--mem=1000", "-o", "/dev/null", "-D", "/tmp"]
    limits = {}
    run = ["-c", "4", "--gres=gpu:1", "-t", str(running_minutes), "--wrap", "sleep 3000"]
    limits[_sbatch(OTHER, *base, *run)] = str(running_minutes)
    time.sleep(1)
    for _ in range(3):
        limits[_sbatch(OTHER, *base, "-c", "8", "-t", "3", "--wrap", "sleep 170")] = "3"
    return limits


def _minutes_left(others: dict[str, str], window: datetime) -> int:
    """Whole minutes a job of the run may ask for now without delaying what holds the
    resources next (the first of the other user's running jobs to end, or the window),
    less SLURM's backfill resolution (``bf_resolution``, 60 s by default): the plan keeps
    when jobs begin and end to that resolution, so a job ending less than one resolution
    before another's planned start is held back by it."""
    ends = [window]
    for job_id in others:
        argv = ["squeue", "-h", "-t", "R", "-j", job_id, "-o", "%e"]
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()
        if out and out not in ("N/A", "NONE"):
            ends.append(datetime.fromisoformat(out))
    return int((min(ends) - datetime.now()).total_seconds() // 60) - 1


def _limits(user: str) -> dict[str, int]:
    out = subprocess.run(
        ["squeue", "-h", "-u", user, "-t", "PD,R", "-o", "%i|%l"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return {i: _minutes(limit) for i, limit in (line.split("|") for line in out.split())}


def _minutes(limit: str) -> int:
    days, _, clock = limit.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    hours, minutes = (parts[0], parts[1]) if len(parts) == 3 else (0, parts[0])
    return (int(days or 0) * 24 + hours) * 60 + minutes


def _probes_queued() -> list[str]:
    proc = subprocess.run(
        ["squeue", "-h", "-n", PLAN_PROBES, "-t", "PD,R,CF,CG", "-o", "%i"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.split()


def _held_back(partitions: str, minutes: int) -> str:
    """Why a job of the run's shape asking ``minutes`` did not start within a few backfill
    passes: "" when it did, else SLURM's state, reason and planned start for it."""
    job_id = _sbatch(USER, "-p", partitions, *REQUEST, "-t", str(minutes), "--wrap", "sleep 2")
    deadline, seen = time.monotonic() + 30, ""
    while time.monotonic() < deadline:
        seen = subprocess.run(
            ["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T %r %S"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if seen and not seen.startswith("PENDING"):
            return ""
        time.sleep(0.5)
    subprocess.run(["scancel", job_id], check=False)
    return f"job {job_id} of {minutes} min: {seen or 'not listed'}"


#: (the run's pending jobs, another user's job ends in, minutes to the window, partitions)
MATRIX = [(1, 12, 20, "ice-gpu"), (6, 25, 40, "ice-gpu,coe-gpu"), (6, None, 15, "ice-gpu")]


@pytest.mark.usefixtures("ordinary_user")
def test_slurms_plan_names_a_limit_that_really_starts_on_a_busy_cluster():
    rows = []
    for pending, others_end, offset, partitions in MATRIX:
        window = _reserve(offset)
        try:
            others = _others(others_end) if others_end else {}
            first = None
            for _ in range(pending):
                job = _sbatch(USER, "-p", partitions, *REQUEST, "-t", "960", "--wrap", "sleep 600")
                first = first or job
            sr.wait_for(
                lambda: all(sr.planned(j["id"]) for j in _user_jobs()),
                120,
                "a backfill pass over the user's jobs",
            )
            code = (
                "import functools, json; from dataclasses import asdict;"
                "from shardwise.ops.walltime import plan_probe;"
                "from shardwise.ops.walltime import probe as walltime_probe;"
                "from shardwise.slurm import queries;"
                f"d = queries.job_detail({first!r}).value;"
                "o = functools.partial(walltime_probe.test_only_options, d);"
                "print(json.dumps(asdict(plan_probe.probe(o, 960, 5, bf_interval=5))))"
            )
            probed = _as_user(sys.executable, "-c", code, cwd=Path("/tmp"), timeout=240)
            assert probed.returncode == 0, probed.stderr
            plan = json.loads(probed.stdout)
            assert _probes_queued() == [], plan
            assert plan["left"] == [] and plan["problem"] is None, plan
            found = plan["longest_now"]
            horizon = (window - datetime.now()).total_seconds() / 60
            if others_end:
                horizon = min(horizon, others_end)  # the other user's plan holds the GPUs then
            assert found is not None, plan
            assert horizon * 0.6 <= found <= horizon, (found, horizon, plan)
            # the answer held when the probe gave it; minutes passed since (the probe under
            # load): a limit past what is left of the other user's job, or of the time to the
            # window, would now delay their plan. The plan's answer, counted down by the time
            # elapsed, must start at once.
            held = _held_back(partitions, min(found, _minutes_left(others, window)))
            rows.append(
                (
                    pending,
                    others_end,
                    offset,
                    partitions,
                    found,
                    round(horizon, 1),
                    not held,
                    plan["calls"],
                    plan["seconds"],
                    plan["submitted"],
                )
            )
            assert not held, (held, rows[-1])
            kept = _limits(OTHER)
            assert all(kept[i] == int(limit) for i, limit in others.items() if i in kept)
        finally:
            for user in (USER, OTHER):
                subprocess.run(["scancel", "-u", user], check=False, capture_output=True)
            sr.wait_for(lambda: not _user_jobs(), 60, "the cell's jobs to go")
    head = "pending others_end window partitions longest_now horizon starts calls s probes"
    print("\n" + head + "\n" + "\n".join(" ".join(map(str, r)) for r in rows), file=sys.stderr)
    _scontrol("delete", "reservation=sw_hidden_maint", check=False)


@pytest.mark.usefixtures("ordinary_user")
def test_a_workflow_killed_during_a_probe_and_an_adaptation_is_finished_by_the_same_command():
    """The adapting workflow, its jobs pending behind a hidden window, is killed with -9 while
    a plan probe is queued (the event), and ``cluster status`` too: the next ``cluster
    status`` clears what they left, the run's jobs keep their limits or lower ones; two
    statuses at once: the second leaves the first's live probes alone and waits for them.
    Then the same snakemake command, run again, adopts the pending jobs and is killed again
    as it fits them to SLURM's plan (the event: its ``fitted`` line); run once more, with no
    other operator command, it finishes the run: every file labelled once."""
    _reserve(30)
    with _users_folder() as base:
        made = _as_user(sys.executable, "-m", "shardwise.cli", "demo", str(base / "demo"), cwd=base)
        assert made.returncode == 0, made.stderr[-2000:]
        for extra in sorted((base / "demo" / "corpus").rglob("*.*"))[4:]:
            extra.unlink()  # four files: the run ends in a minute once its jobs start
        config = yaml.safe_load((base / "demo" / "config.yaml").read_text())
        config["inference"]["device"] = "cpu"
        config["resources"] = {"classify": {"runtime": 960}}
        config["walltime"] = {"adapt": True, "adapt_check_seconds": 5}
        config["failures"] = {"watch_seconds": 5}
        configfile = base / "config.yaml"
        configfile.write_text(yaml.safe_dump(config, sort_keys=False))
        shutil.chown(configfile, USER, USER)
        run_dir = base / "demo" / "run"
        extra = (
            "--jobs",
            "4",
            "--set-resources",
            "classify:gpu=1",
            "classify:cpus_per_task=4",
            "classify:mem_mb=32000",
        )
        cmd = sr.snakemake(base, configfile, sr.PROFILE, sr.PROFILE_CI, extra=extra)
        try:
            run = _start(cmd, base, "first.log")
            sr.wait_for(_probes_queued, 240, "the workflow's first plan probe")
            before = _limits(USER)
            _kill(run)
            status = _as_user(
                sys.executable, "-m", "shardwise.cli", "cluster", "status", "--run-dir",
                str(run_dir), "--format", "json", cwd=base, timeout=300,
            )  # fmt: skip
            assert _probes_queued() == [], status.stdout[-2000:]
            doc = sr.json_doc(status)
            after = _limits(USER)
            ours = {i: m for i, m in before.items() if i not in _probe_ids(before)}
            assert set(ours) <= set(after) and all(after[i] <= m for i, m in ours.items())
            planned = doc["walltime_probe"]["planned"]
            assert planned is not None and planned["left"] == [], planned
            _two_statuses_at_once(run_dir, base)
            run = _start(cmd, base, "second.log")
            _one_probe_per_run(run_dir, base)
            # a fit, or (before any file has finished) the one job lowered to measure it
            lowering = (
                "SLURM's plan for its request starts",
                "alone is lowered to the longest limit SLURM's plan starts now",
            )
            sr.wait_for(lambda: any(said in _log(base, "second.log") for said in lowering),
                        300, "the second invocation's fit")  # fmt: skip
            _kill(run)  # during the adaptation: the fit said, the jobs being lowered
            run = _start(cmd, base, "third.log")
            assert run.wait(timeout=600) == 0, _log(base, "third.log")[-4000:]
        finally:
            subprocess.run(["pkill", "-KILL", "-u", USER], check=False, capture_output=True)
            subprocess.run(["scancel", "-u", USER], check=False, capture_output=True)
        third = _log(base, "third.log")
        said = [
            ln for ln in third.splitlines() if ln.startswith(("shardwise", "note", "in flight"))
        ]
        print("\n--- the third invocation ---\n" + "\n".join(said), file=sys.stderr)
        assert "cleared Snakemake's lock" in third, third[-4000:]
        # The lowered jobs may start and end before the third invocation looks (a loaded
        # machine): then there is nothing to adopt, only finished shards to pick up.
        assert "in flight" not in third or "adopted" in third, third[-4000:]
        assert _probes_queued() == []
        verified = _as_user(sys.executable, "-m", "shardwise.cli", "verify", "--run-dir",
                            str(run_dir), "--complete", cwd=base)  # fmt: skip
        assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
        journals = (base / "demo" / "run" / "progress").glob("*.jsonl")
        labelled = [json.loads(ln)["file"] for p in journals for ln in p.read_text().splitlines()]
        assert len(labelled) == len(set(labelled)) == 4  # each file labelled once
        for name in ("first.log", "second.log", "third.log"):
            assert "Traceback" not in _log(base, name), name


def _start(cmd: list[str], base: Path, name: str) -> subprocess.Popen:
    """The workflow as the user, its console in ``base/name``."""
    with (base / name).open("w") as log:
        return subprocess.Popen(_user_argv(cmd), cwd=base, stdout=log, stderr=subprocess.STDOUT)


def _kill(run: subprocess.Popen) -> None:
    """kill -9 of the user's snakemake (its jobs and probes live on)."""
    subprocess.run(["pkill", "-KILL", "-u", USER, "-f", "snakemake"], check=False)
    run.wait()


def _log(base: Path, name: str) -> str:
    return (base / name).read_text()


def _two_statuses_at_once(run_dir: Path, base: Path) -> None:
    """A second ``cluster status`` while the first one's probes are queued: it leaves them
    to their live owner, waits for them to end, then asks; both answers are whole."""
    argv = [sys.executable, "-m", "shardwise.cli", "cluster", "status", "--run-dir",
            str(run_dir), "--format", "json"]  # fmt: skip
    first = subprocess.Popen(_user_argv(argv), cwd=base, stdout=subprocess.PIPE, text=True)
    try:
        sr.wait_for(_probes_queued, 120, "the first status's plan probe")
        second = _as_user(*argv, cwd=base, timeout=300)
        out, _ = first.communicate(timeout=300)
    finally:
        first.kill()
    plans = [sr.json_doc(second)["walltime_probe"]["planned"]]
    plans.append(json.loads(out)["walltime_probe"]["planned"])
    for plan in plans:
        assert plan["left"] == [] and plan["problem"] is None, plan
        assert plan["longest_now"] is not None, plan  # the window is 30 min away, no one else
    assert plans[0]["waited"] >= 1, plans[0]
    assert _probes_queued() == []


def _one_probe_per_run(run_dir: Path, base: Path) -> None:
    """``cluster status`` while the live workflow adapts (before or after its first fit):
    it starts no probe of its own and says whose answer counts."""
    sr.wait_for(lambda: adapting_workflow(run_dir) is not None, 240, "the workflow to adapt")
    status = _as_user(sys.executable, "-m", "shardwise.cli", "cluster", "status", "--run-dir",
                      str(run_dir), "--format", "json", cwd=base, timeout=300)  # fmt: skip
    doc = sr.json_doc(status)
    said = [n for n in doc["notes"] if n.startswith("no walltime probe")]
    print(f"\n--- cluster status beside the adapting workflow ---\n{said}", file=sys.stderr)
    assert said and doc["walltime_probe"] is None, status.stdout[-3000:]


def _probe_ids(limits: dict[str, int]) -> set[str]:
    """Which of these job ids are plan probes (squeue by name)."""
    out = subprocess.run(
        ["squeue", "-h", "--states=all", "-n", PLAN_PROBES, "-o", "%i"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return set(out.split()) & set(limits)


@pytest.mark.usefixtures("ordinary_user")  # holds the cluster's lock for this module
def test_the_campaign_keeps_the_free_gpu_busy_before_the_window_with_no_operator(tmp_path):
    """bench/campaign.py's smoke run: both campaigns in one wave (it makes its own users
    and reservation, as root)."""
    out = tmp_path / "campaign.json"
    # the other user's job ends 3 min before the window (his 8-CPU jobs then fill the
    # node until it): about 6 min of the free GPU for the run, more than one file's 5
    argv = [sys.executable, str(sr.REPO / "bench" / "campaign.py"), "--window", "10",
            "--others-minutes", "7", "--json", str(out)]  # fmt: skip
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=900, env=sr.env(), check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(proc.stdout, file=sys.stderr)
    report = json.loads(out.read_text())
    adapt, configured = report["campaigns"]["adapt"], report["campaigns"]["configured"]
    assert configured["files_before_window"] == 0, configured
    assert adapt["files_before_window"] > 0, adapt["log_tail"]
    assert adapt["busy_fraction"] > configured["busy_fraction"]
    assert adapt["operator_commands"] == 0 and adapt["probe"]["probes"] >= 1
    assert report["probes_left"] == 0 and report["others_limits_kept"], report
    # the floor a file needs, as measured: its start-up, its file, the stop signal (issue 62)
    floor = adapt["floor"]
    assert floor["floors"] and floor["ratio"] is not None, floor
    assert floor["ratio"] <= 1.5, floor
