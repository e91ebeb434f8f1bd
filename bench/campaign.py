"""A labelling campaign on a busy cluster before a hidden maintenance window, run twice.

On the real test cluster (tests/slurm/cluster.sh; as root, which makes the users):
``PrivateData=accounts,jobs,reservations,usage,users``, a maintenance reservation on
every node ``--window`` minutes ahead that the users cannot see, and another user's load:
one job running (4 CPUs + 1 GPU, ending ``--others-minutes`` from now) and three runnable
8-CPU jobs pending ahead, which the backfill plan starts when it ends. Two ordinary users
run the same demo campaign at the same time, with the production request (4 CPUs,
32000 MB, 1 GPU per job, ``--limit`` minutes per shard) and no operator command:

* ``configured``: ``walltime.adapt: false``, the configured limit only (what a
  hand-written launcher does);
* ``adapt``: ``walltime.adapt: true`` (the workflow fits its limits to SLURM's plan).

The configured campaign's jobs cannot start before the window, so they never take a GPU
from the adapting one: one wave measures both. At the window's start both workflows are
interrupted. Figures per campaign: the fraction of the GPU-slot time free of other users'
jobs between the start and the window that the campaign's jobs held (sacct), files and
shards labelled before the window, operator commands (0), and the probes' cost (the
adaptation's record). ``--kill-once``: the adapting workflow is ``kill -9``-ed as soon as
its first plan probe is queued, then started again: what that start found and cleared.

    python bench/campaign.py                          # window in 12 min
    python bench/campaign.py --window 10 --others-minutes 7 --json out.json  # CI's smoke

``--preempt``: the preemption cell instead, on the cluster restarted with preemption
(``cluster.sh`` with ``SHARDWISE_SLURM_PREEMPT=1``; 2 GPUs). The user's fair share is one
GPU (partition ``main`` under a QOS of ``MaxTRESPerUser=gres/gpu=1``, not preemptible);
the other GPU is idle capacity lent through ``scavenger``, a preemptible partition
(``--scavenger-mode``, CANCEL with GraceTime 0 by default: the harshest; the workflow
requeues what SLURM cancels). Two campaigns of the same demo, one after the other, with no
operator command: ``guaranteed`` (``main`` only) and ``preemptible`` (``main,scavenger``).
In each, ``--preempt-after`` seconds after its jobs hold their GPUs, another user takes one GPU
through ``urgent`` (PriorityTier 10) for ``--others-seconds``: the scavenger job is
preempted, requeued, and resumes. Figures per campaign: wall time to the last marker,
GPU-seconds held and their share of the GPU-slot time free of the other user's job,
preemptions, files labelled more than once and files lost (both 0).

    python bench/campaign.py --preempt --json out.json          # CI's smoke

``--sites``: the two-site cell instead (``bench/sites.py``; no cluster, no root): one
campaign, two sites with their own run directories and one core each, one moto bucket.
Per site: wall time, shard jobs, slot use, files labelled; files labelled twice and lease
takeovers; and, with site a killed -9 while it holds a shard, the seconds from its death
to the other site's takeover of that shard (``--lease-seconds``).

    python bench/campaign.py --sites --json out.json            # CI's smoke
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import yaml

from shardwise.slurm.profile import SIGNAL_EARLY_S
from shardwise.slurm.profile import SIGNAL_LEAD_S as PROFILE_LEAD_S

REPO = Path(__file__).resolve().parent.parent
CLUSTER_SH = REPO / "tests" / "slurm" / "cluster.sh"
PROFILES = (REPO / "profiles" / "slurm", REPO / "tests" / "slurm" / "profile-ci")
PRIVATE = "accounts,jobs,reservations,usage,users"
RESERVATION = "sw_campaign_maint"
OTHER = "swother"
USERS = {"configured": "swbase", "adapt": "swplain"}
PROBE = "shardwise-plan-probe"
PRODUCTION = ("classify:gpu=1", "classify:cpus_per_task=4", "classify:mem_mb=32000")


def sh(*argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """Run a command as root; its CompletedProcess (text)."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def user_argv(user: str, argv: list[str]) -> list[str]:
    """``argv`` as ``user``, with the venv first on PATH and nothing else inherited."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": f"/home/{user}",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
    }
    return ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]


def open_for_others(paths: list[Path]) -> list[tuple[Path, int]]:
    """o+x on every folder above ``paths`` (o+rx on them) that lacks it; the old modes."""
    changed = []
    for path in paths:
        for folder in [path.resolve(), *path.resolve().parents]:
            mode = folder.stat().st_mode
            want = stat.S_IXOTH | (stat.S_IROTH if folder == path.resolve() else 0)
            if mode & want != want:
                changed.append((folder, stat.S_IMODE(mode)))
                folder.chmod(stat.S_IMODE(mode) | want)
    return changed


def prepare(base: Path, user: str, *, adapt: bool, limit: int, docs: int) -> tuple[Path, Path]:
    """The demo in ``base`` (owned by ``user``, ``docs`` documents per file), configured
    for this campaign; (config, run_dir)."""
    base.mkdir(parents=True)
    shutil.chown(base, user, user)
    base.chmod(0o755)
    code = "import sys; from pathlib import Path; from shardwise.demo.corpus import DemoSize, "
    code += f"write_demo; write_demo(Path(sys.argv[1]), DemoSize(docs_per_file={docs}))"
    argv = user_argv(user, [sys.executable, "-c", code, str(base / "demo")])
    made = subprocess.run(argv, capture_output=True, text=True, cwd=base, check=False)
    if made.returncode != 0:
        raise SystemExit(f"shardwise demo failed as {user}: {made.stderr[-2000:]}")
    config = yaml.safe_load((base / "demo" / "config.yaml").read_text())
    config["inference"]["device"] = "cpu"  # fake GPUs, CPU torch
    config["resources"] = {"classify": {"runtime": limit}}
    config["walltime"] = {"adapt": adapt, "adapt_check_seconds": 5, "adapt_probe_seconds": 30}
    path = base / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.chown(path, user, user)
    return path, Path(config["run_dir"])


def start(
    user: str, base: Path, config: Path, *, extra_profiles: tuple[Path, ...] = (), group: int = 2
) -> subprocess.Popen:
    """The campaign's snakemake as ``user``, production request, ``group`` shards per job."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(base),
        "--configfile",
        str(config),
    ]
    for profile in (*PROFILES, *extra_profiles):
        cmd += ["--profile", str(profile)]
    cmd += ["--jobs", "4", "--group-components", f"classify={group}"]
    cmd += ["--set-resources", *PRODUCTION]
    log = (base / "snakemake.log").open("a")
    return subprocess.Popen(user_argv(user, cmd), cwd=base, stdout=log, stderr=subprocess.STDOUT)


def others_load(minutes: int) -> None:
    """Another user's jobs: one holding 4 CPUs and a GPU for ``minutes``, three runnable
    8-CPU jobs pending ahead of everything submitted later."""
    common = ["sbatch", "-p", "ice-gpu", "--mem=1000", "-o", "/dev/null", "-D", "/tmp"]
    run = ["-c", "4", "--gres=gpu:1", "-t", str(minutes), "--wrap", f"sleep {minutes * 60}"]
    sh("runuser", "-u", OTHER, "--", *common, *run)
    time.sleep(1)
    for _ in range(3):
        sh("runuser", "-u", OTHER, "--", *common, "-c", "8", "-t", "3", "--wrap", "sleep 170")


def reserve(minutes: int) -> datetime:
    """A maintenance reservation on every node from ``minutes`` on; its start."""
    sh("scontrol", "delete", f"reservation={RESERVATION}", check=False)
    sh(
        "scontrol",
        "create",
        "reservation",
        f"reservationname={RESERVATION}",
        f"starttime=now+{minutes}minutes",
        "duration=60",
        "nodes=ALL",
        "flags=maint,ignore_jobs",
        "users=root",
    )
    shown = sh("scontrol", "show", "reservation", RESERVATION).stdout
    return datetime.fromisoformat(shown.split("StartTime=")[1].split()[0])


def queued(user: str, name: str | None = None) -> list[str]:
    """The ids of ``user``'s queued jobs (of ``name``)."""
    argv = ["squeue", "-h", "-u", user, "-t", "PD,R,CF,CG", "-o", "%i"]
    return sh(*argv, *(["-n", name] if name else []), check=False).stdout.split()


def limits(user: str) -> dict[str, str]:
    """Time limits of ``user``'s queued jobs, by id."""
    out = sh("squeue", "-h", "-u", user, "-t", "PD,R", "-o", "%i|%l", check=False).stdout
    return dict(line.split("|", 1) for line in out.split())


def kill_once(user: str, proc: subprocess.Popen, base: Path, config: Path) -> dict:
    """``kill -9`` the adapting workflow once its first plan probe is queued; start it again
    and say what the new start found: probes queued before it, and after its first round."""
    deadline = time.monotonic() + 240
    while not queued(user, PROBE):
        if time.monotonic() > deadline or proc.poll() is not None:
            return {"killed": False}
        time.sleep(0.2)
    sh("pkill", "-KILL", "-u", user, "-f", "snakemake", check=False)
    proc.wait()
    left = len(queued(user, PROBE))
    again = start(user, base, config)
    time.sleep(15)  # the new start's first rounds (checks every 5 s)
    return {"killed": True, "probes_left_by_kill": left, "proc": again}


def gpu_seconds(user: str, since: datetime, until: datetime) -> float:
    """GPU-seconds ``user``'s jobs held between ``since`` and ``until`` (sacct)."""
    out = sh(
        "sacct",
        "-X",
        "-n",
        "-P",
        "-u",
        user,
        "-S",
        f"{since:%Y-%m-%dT%H:%M:%S}",
        "-o",
        "JobName,Start,End,AllocTRES",
        check=False,
    ).stdout
    total = 0.0
    for line in out.splitlines():
        name, begin, end, tres = [*line.split("|"), "", "", ""][:4]
        if name == PROBE or "gres/gpu=" not in tres or begin in ("", "Unknown", "None"):
            continue
        gpus = int(tres.split("gres/gpu=")[1].split(",")[0])
        stop = until if end in ("", "Unknown") else min(datetime.fromisoformat(end), until)
        total += gpus * max(0.0, (stop - max(datetime.fromisoformat(begin), since)).total_seconds())
    return total


def labelled_before(run_dir: Path, output: Path, window: datetime) -> tuple[int, int]:
    """(files, shards) whose markers were written before ``window``."""
    cut = window.timestamp()
    files = sum(1 for p in output.rglob("*.done") if p.stat().st_mtime < cut)
    shards = sum(1 for p in (run_dir / "shards").glob("*.done") if p.stat().st_mtime < cut)
    return files, shards


def probe_cost(run_dir: Path) -> dict:
    """What the adaptation's probes cost and what it changed (its record)."""
    path = run_dir / "walltime-adapt.json"
    if not path.exists():
        return {"probes": 0, "calls": 0, "seconds": 0.0, "probe_jobs": 0, "lowered": 0}
    events = json.loads(path.read_text())["events"]
    probed = [e for e in events if e["probe_calls"]]
    return {
        "probes": len(probed),
        "calls": sum(e["probe_calls"] for e in probed),
        "seconds": round(sum(e["probe_seconds"] for e in probed), 1),
        "probe_jobs": sum(e["probe_jobs"] for e in probed),
        "lowered": sum(e["action"] == "lowered" for e in events),
        "lines": [e["text"] for e in events],
    }


#: Seconds before its limit a job may be told to stop: the test profile's
#: ``--signal=TERM@120``, which SLURM may send up to 60 s early (sbatch(1)).
SIGNAL_LEAD_S = PROFILE_LEAD_S + SIGNAL_EARLY_S


def floor_against_need(run_dir: Path, output: Path) -> dict:
    """The walltime fit's floor for one file (the last one its record says) against what a
    one-file job of this run measurably needed: its start-up, the longest file, and the
    stop signal's lead with SLURM's early minute (the stats' ``startup_s`` and
    ``seconds``), and whether a file's time followed its bytes here (their correlation)."""
    path = run_dir / "walltime-adapt.json"
    events = json.loads(path.read_text())["events"] if path.exists() else []
    floors = [e["minutes"] for e in events if e["action"] == "floor" and e["minutes"]]
    stats = [json.loads(p.read_text()) for p in output.rglob("*.stats.json")]
    seconds = [s["seconds"] for s in stats if s.get("seconds")]
    startups = [s["startup_s"] for s in stats if s.get("startup_s") is not None]
    sizes = [s["bytes"] for s in stats if s.get("seconds")]
    need = max(startups, default=0.0) + max(seconds, default=0.0) + SIGNAL_LEAD_S
    spread = len(set(sizes)) > 1 and len(set(seconds)) > 1
    corr = float(np.corrcoef(sizes, seconds)[0, 1]) if spread else None
    return {
        "floors": floors,
        "files": len(seconds),
        "longest_file_s": round(max(seconds, default=0.0), 1),
        "startup_s": round(max(startups, default=0.0), 1),
        "need_s": round(need, 1),
        "ratio": round(floors[-1] * 60 / need, 2) if floors and seconds else None,
        "bytes_seconds_correlation": None if corr is None else round(corr, 2),
    }


#: The preemption cell's campaigns: the partitions each may use.
PREEMPT_CAMPAIGNS = {"guaranteed": "main", "preemptible": "main,scavenger"}
FAIR_SHARE_QOS = "swfairshare"


def preempt_cell(args: argparse.Namespace) -> dict:
    """Both campaigns of the preemption cell, one after the other; their figures."""
    env = {**os.environ, "SHARDWISE_SLURM_PREEMPT": "1"}
    sh("bash", str(CLUSTER_SH), "start", env=env)
    sh("sacctmgr", "-i", "add", "qos", FAIR_SHARE_QOS, "MaxTRESPerUser=gres/gpu=1", check=False)
    sh("scontrol", "update", "PartitionName=main", f"QOS={FAIR_SHARE_QOS}", "PreemptMode=OFF")
    sh("scontrol", "update", "PartitionName=scavenger", f"PreemptMode={args.scavenger_mode}",
       "GraceTime=0")  # fmt: skip
    user = USERS["adapt"]
    for who in (user, OTHER):
        sh("bash", str(CLUSTER_SH), "add-user", who)
    venv = Path(sys.executable).parent.parent
    opened = open_for_others([REPO, venv, Path(sys.base_prefix)])
    root = Path(tempfile.mkdtemp(prefix="shardwise-preempt-"))
    root.chmod(0o755)
    out: dict = {
        "cell": "preempt",
        "campaigns": {},
        "others_seconds": args.others_seconds,
        "scavenger_mode": args.scavenger_mode,
    }
    try:
        for name, partitions in PREEMPT_CAMPAIGNS.items():
            out["campaigns"][name] = preempt_campaign(root / name, user, partitions, args)
    finally:
        for who in (user, OTHER):
            sh("pkill", "-KILL", "-u", who, check=False)
            sh("scancel", "-u", who, check=False)
        sh("scontrol", "update", "PartitionName=main", "QOS=", "PreemptMode=REQUEUE", check=False)
        sh("scontrol", "update", "PartitionName=scavenger", "PreemptMode=REQUEUE", check=False)
        for path, mode in opened:
            path.chmod(mode)
        shutil.rmtree(root, ignore_errors=True)
    return out


def preempt_campaign(base: Path, user: str, partitions: str, args: argparse.Namespace) -> dict:
    """One campaign of the preemption cell, to its end; its figures."""
    config, run_dir = prepare(base, user, adapt=False, limit=10, docs=args.docs_per_file)
    data = yaml.safe_load(config.read_text())
    data["sharding"]["total_shards"] = 4
    data["failures"] = {"watch_seconds": 2}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    overlay = base / "profile"
    overlay.mkdir()
    resources = {"slurm_partition": repr(partitions), "slurm_account": "'shardwise'",
                 "mem_mb": 500, "cpus_per_task": 1, "runtime": 10}  # fmt: skip
    (overlay / "config.yaml").write_text(yaml.safe_dump({"default-resources": resources}))
    shutil.chown(overlay / "config.yaml", user, user)
    began = datetime.now()
    proc = start(user, base, config, extra_profiles=(overlay,), group=1)
    deadline = time.monotonic() + 600
    want = len(partitions.split(","))  # one GPU in each partition: the fair share, the lent one
    while len([j for j in queued(user) if _running(j)]) < want:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(
                f"no job of the campaign started: {(base / 'snakemake.log').read_text()[-3000:]}"
            )
        time.sleep(0.5)
    time.sleep(args.preempt_after)
    sh("runuser", "-u", OTHER, "--", "sbatch", "-p", "urgent", "--gpus=1", "-t", "5",
       "-o", "/dev/null", "-D", "/tmp", "--wrap", f"sleep {args.others_seconds}")  # fmt: skip
    code = proc.wait(timeout=1800)
    ended = datetime.now()
    wall = (ended - began).total_seconds()
    others = gpu_seconds(OTHER, began, ended)
    held = gpu_seconds(user, began, ended)
    journals = [
        ln for p in (run_dir / "progress").glob("*.jsonl") for ln in p.read_text().splitlines()
    ]
    labelled = Counter(json.loads(ln)["file"] for ln in journals)
    output = Path(data["output"]["uri"])
    planned = len(list((base / "demo" / "corpus").rglob("*.*")))
    events = [json.loads(ln) for ln in _lines(run_dir / "job-events.jsonl")]
    return {
        "partitions": partitions,
        "exit": code,
        "wall_seconds": round(wall, 1),
        "gpu_seconds": round(held, 1),
        "gpu_slot_use": round(held / max(1.0, 2 * wall - others), 3),
        "preemptions": len({(e["job_id"], e["run"]) for e in events if e["kind"] == "preempted"}),
        "files_labelled_twice": sum(1 for n in labelled.values() if n > 1),
        "files_lost": planned - sum(1 for _ in output.rglob("*.done")),
        "operator_commands": 0,
    }


def _running(job_id: str) -> bool:
    state = sh("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()
    return state == "RUNNING"


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def print_preempt(report: dict) -> None:
    """The preemption cell as a table."""
    print(f"preemption cell: another user takes one GPU for {report['others_seconds']} s; "
          f"scavenger preempts with {report['scavenger_mode']}")  # fmt: skip
    print(f"{'campaign':<12} {'partitions':<16} {'wall s':>7} {'GPU s':>7} {'slot use':>9} "
          f"{'preempted':>10} {'twice':>6} {'lost':>5} {'operator':>9}")  # fmt: skip
    for name, c in report["campaigns"].items():
        print(f"{name:<12} {c['partitions']:<16} {c['wall_seconds']:>7g} {c['gpu_seconds']:>7g} "
              f"{c['gpu_slot_use']:>9.1%} {c['preemptions']:>10} {c['files_labelled_twice']:>6} "
              f"{c['files_lost']:>5} {c['operator_commands']:>9}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=int, default=12, help="minutes to the window")
    parser.add_argument(
        "--others-minutes", type=int, default=8, help="when the other user's running job ends"
    )
    parser.add_argument("--limit", type=int, default=960, help="configured minutes per shard")
    parser.add_argument("--docs-per-file", type=int, default=200, help="the demo's is 40")
    parser.add_argument("--kill-once", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--preempt", action="store_true", help="the preemption cell instead")
    parser.add_argument("--preempt-after", type=float, default=10, help="seconds into the run")
    parser.add_argument("--others-seconds", type=int, default=30, help="the other user's job")
    parser.add_argument("--scavenger-mode", default="CANCEL", choices=("CANCEL", "REQUEUE"))
    parser.add_argument("--sites", action="store_true", help="the two-site cell instead")
    parser.add_argument("--lease-seconds", type=float, default=3, help="the two-site cell's")
    args = parser.parse_args()
    if args.sites:  # no cluster, no root: two local sites and a moto bucket (bench/sites.py)
        import sites

        with tempfile.TemporaryDirectory(prefix="shardwise-sites-") as tmp:
            report = sites.run_cell(Path(tmp), args.lease_seconds)
        sites.print_cell(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        return
    if os.geteuid() != 0:
        raise SystemExit("bench/campaign.py needs root (it makes users and a reservation)")
    if args.preempt:
        report = preempt_cell(args)
        print_preempt(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        return
    sh("bash", str(CLUSTER_SH), "start")
    for user in (*USERS.values(), OTHER):
        sh("bash", str(CLUSTER_SH), "add-user", user)
        sh("scancel", "-u", user, check=False)  # what a killed run of this benchmark left
    sh("bash", str(CLUSTER_SH), "private-data", PRIVATE)
    venv = Path(sys.executable).parent.parent
    opened = open_for_others([REPO, venv, Path(sys.base_prefix)])
    root = Path(tempfile.mkdtemp(prefix="shardwise-campaign-"))
    root.chmod(0o755)
    procs: dict[str, subprocess.Popen] = {}
    try:
        runs = {
            mode: prepare(
                root / mode, user, adapt=mode == "adapt", limit=args.limit, docs=args.docs_per_file
            )
            for mode, user in USERS.items()
        }
        window = reserve(args.window)
        others_load(args.others_minutes)
        others_before = limits(OTHER)
        began = datetime.now()
        procs = {m: start(USERS[m], root / m, runs[m][0]) for m in USERS}
        killed = {}
        if args.kill_once:
            killed = kill_once(USERS["adapt"], procs["adapt"], root / "adapt", runs["adapt"][0])
            procs["adapt"] = killed.pop("proc", procs["adapt"])
            killed["probes_after_restart"] = len(queued(USERS["adapt"], PROBE))
        while datetime.now() < window - timedelta(seconds=2):
            time.sleep(1)
        report = figures(runs, root, began, window, killed, args)
        after = limits(OTHER)
        report["others_limits_kept"] = all(
            after[i] == m for i, m in others_before.items() if i in after
        )
        report["probes_left"] = len(queued(USERS["adapt"], PROBE))
    finally:
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=60)
        for user in (*USERS.values(), OTHER):
            sh("pkill", "-KILL", "-u", user, check=False)
            sh("scancel", "-u", user, check=False)
        sh("scontrol", "delete", f"reservation={RESERVATION}", check=False)
        sh("bash", str(CLUSTER_SH), "private-data", "none", check=False)
        for path, mode in opened:
            path.chmod(mode)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(root, ignore_errors=True)


def figures(
    runs: dict,
    root: Path,
    began: datetime,
    window: datetime,
    killed: dict,
    args: argparse.Namespace,
) -> dict:
    """Every figure of both campaigns at the window's start."""
    seconds = (window - began).total_seconds()
    others = gpu_seconds(OTHER, began, window)
    free = 2 * seconds - others  # the test node's 2 fake GPUs
    out = {
        "window_minutes": args.window,
        "others_minutes": args.others_minutes,
        "limit": args.limit,
        "free_gpu_seconds": round(free, 1),
        "campaigns": {},
        "kill": killed,
    }
    for mode, (config, run_dir) in runs.items():
        output = Path(yaml.safe_load(config.read_text())["output"]["uri"])
        files, shards = labelled_before(run_dir, output, window)
        busy = gpu_seconds(USERS[mode], began, window)
        out["campaigns"][mode] = {
            "busy_fraction": round(busy / free, 3) if free > 0 else 0.0,
            "gpu_seconds": round(busy, 1),
            "files_before_window": files,
            "shards_before_window": shards,
            "operator_commands": 0,
            "probe": probe_cost(run_dir),
            "floor": floor_against_need(run_dir, output),
            "log_tail": (root / mode / "snakemake.log").read_text()[-3000:],
        }
    return out


def print_report(report: dict) -> None:
    """The figures as a table."""
    print(
        f"campaign: window in {report['window_minutes']} min, another user's job ends in "
        f"{report['others_minutes']} min, {report['limit']} min per shard; GPU-seconds "
        f"free of other users before the window: {report['free_gpu_seconds']:g}"
    )
    print(
        f"{'mode':<11} {'busy':>6} {'files':>6} {'shards':>7} {'operator':>9} "
        f"{'probes':>7} {'calls':>6} {'probe s':>8} {'probe jobs':>11} {'lowered':>8}"
    )
    for mode, c in report["campaigns"].items():
        p = c["probe"]
        print(
            f"{mode:<11} {c['busy_fraction']:>6.1%} {c['files_before_window']:>6} "
            f"{c['shards_before_window']:>7} {c['operator_commands']:>9} {p['probes']:>7} "
            f"{p['calls']:>6} {p['seconds']:>8g} {p['probe_jobs']:>11} {p['lowered']:>8}"
        )
    if report["kill"]:
        print(f"kill -9 mid-probe: {report['kill']}")
    floor = report["campaigns"]["adapt"]["floor"]
    print(
        f"adapt: one file's floor {floor['floors']} min against a one-file job's need "
        f"{floor['need_s']:g} s (start-up {floor['startup_s']:g} s + longest file "
        f"{floor['longest_file_s']:g} s + {SIGNAL_LEAD_S} s of signal): {floor['ratio']}x; "
        f"bytes/seconds correlation {floor['bytes_seconds_correlation']}"
    )
    for line in report["campaigns"]["adapt"]["probe"].get("lines", []):
        print(f"  adapt: {line}")


if __name__ == "__main__":
    main()
