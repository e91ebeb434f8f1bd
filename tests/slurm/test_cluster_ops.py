"""`shardwise cluster check` and `cluster status` against the real test cluster.

- a maintenance reservation (flags=maint over all nodes, starting in 20 min): the
  run's jobs, asking for 120 min, pend with "ReqNodeNotAvail, Reserved for
  maintenance"; status explains it, and `sbatch --test-only` and the visible window
  find that a walltime ending before the window starts now; a drained node's reason
  shows in check and status;
- a QOS cap of 2 with `jobs` 5: check FAILs with the fix; against a full cap the
  refused submission's own message reaches the console and the shard's log;
- an excluded node that does not exist: check FAILs naming it, the written overlay
  fixes it, a run shows sbatch's "Invalid node name specified"; the production
  profile with only the account set submits on this cluster;
- accounting off: check says sacct would hang and the cap is unknown, quickly.

Every change to the cluster (reservation, drained node, QOS jobs, accounting mode)
is undone in a `finally`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import jsonschema
import pytest
import slurmrun as sr

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

RESERVATION = "shardwise-test-maint"
#: Jobs ask for 2 x 60 min: longer than the 20 minutes before the window.
#: The workflow does not adapt here: `cluster status` makes the probe (a live adapting
#: workflow makes its own, and `cluster status` then makes none: tests/slurm/test_adapt.py).
LONG = {"min_minutes": 60, "max_minutes": 60, "default_mb_per_minute": 50, "safety_factor": 2,
        "adapt": False}  # fmt: skip
#: One partition, as the production profile asks (with a list, --test-only is not asked).
ONE_PARTITION = ("--default-resources", "slurm_partition='ice-gpu'", "slurm_account='shardwise'",
                 "mem_mb=500", "cpus_per_task=1", "runtime=10")  # fmt: skip
ACCOUNT = {"SHARDWISE_SLURM_ACCOUNT": "shardwise"}


def _schema(name: str) -> dict:
    return json.loads((sr.SCHEMAS / f"{name}.schema.json").read_text())


def _scontrol(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, check=False)


def _node() -> str:
    import socket

    return socket.gethostname().split(".")[0]


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    with slurm_cluster.exclusive():
        yield slurm_cluster


@pytest.fixture(scope="module")
def maintenance_run(cluster, tmp_path_factory):
    """A run whose 4 jobs pend behind a maintenance window (undone afterwards)."""
    base = tmp_path_factory.mktemp("maint")
    configfile = sr.demo(base, walltime=LONG)
    workdir = base / "work"
    workdir.mkdir()
    made = _scontrol(
        "create", "reservation", f"reservationname={RESERVATION}", "starttime=now+20minutes",
        "duration=120", "nodes=ALL", "flags=maint", "users=root",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    log = base / "snakemake.log"
    proc = subprocess.Popen(
        sr.snakemake(workdir, configfile, sr.PROFILE, sr.PROFILE_CI, extra=ONE_PARTITION),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=sr.env(),
    )
    try:
        sr.wait_for(
            lambda: (
                len([j for j in sr.squeue_of(workdir) if "Reserved for maintenance" in j["reason"]])
                == 4
            ),
            120,
            f"4 jobs pending behind the maintenance window ({log})",
        )
        sr.wait_for(lambda: all(sr.planned(j["id"]) for j in sr.squeue_of(workdir)), 240,
                    "a backfill pass over the run's jobs")  # fmt: skip
        yield {"run_dir": base / "demo" / "run", "workdir": workdir, "log": log}
    finally:
        sr.interrupt(proc)
        sr.scancel_workdir(workdir)
        _scontrol("delete", f"reservation={RESERVATION}")


def test_status_explains_maintenance_and_finds_a_walltime_that_starts_now(maintenance_run):
    run_dir = maintenance_run["run_dir"]
    proc = sr.shardwise("cluster", "status", "--run-dir", str(run_dir), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = sr.json_doc(proc)
    jsonschema.validate(doc, _schema("cluster-status"))
    assert doc["counts"]["pending"] == 4 and doc["counts"]["running"] == 0
    assert sorted(s for j in doc["jobs"] for s in j["shards"]) == list(range(8))
    (group,) = doc["pending_reasons"]
    assert group["reason"] == "ReqNodeNotAvail, Reserved for maintenance"
    assert group["known"] and "maintenance reservation" in group["meaning"]
    probe = doc["walltime_probe"]
    own = next(r for r in probe["rows"] if r["label"] == "its own request")
    assert own["minutes"] == 120 and own["starts_now"] is False
    now = [r for r in probe["rows"] if r["starts_now"]]
    assert now, probe
    assert max(r["minutes"] for r in now) < 20  # ends before the window opens
    # the visible window gives its own row, whatever --test-only says behind the run's jobs
    (window,) = [r for r in probe["rows"] if r["source"].startswith(f"reservation {RESERVATION}")]
    assert window["label"] == "ends before the window" and 15 <= window["minutes"] < 20
    assert probe["advice"].startswith("a job asking for")
    assert sorted(f["shard"] for f in doc["in_flight"]) == list(range(8))
    table = sr.shardwise("cluster", "status", "--run-dir", str(run_dir))
    assert "would a shorter walltime start now?" in table.stdout
    print(
        f"\n--- cluster status with a maintenance reservation ---\n{table.stdout}", file=sys.stderr
    )


def test_check_warns_of_the_window_with_a_walltime_fix(maintenance_run):
    proc = sr.shardwise(
        "cluster", "check", "--profile", str(sr.PROFILE), "--profile", str(sr.PROFILE_CI),
        "--format", "json", extra_env=ACCOUNT,
    )  # fmt: skip
    doc = sr.json_doc(proc)
    (res,) = [f for f in doc["findings"] if f["check"] == "reservations"]
    assert res["status"] == "WARN" and res["found"].startswith(f"maintenance {RESERVATION} from")
    assert res["fix"].startswith("walltime.max_minutes:")


def test_a_drained_node_shows_its_reason_in_check_and_status(maintenance_run):
    node = _node()
    reason = "shardwise test: fan broken"
    drained = _scontrol("update", f"nodename={node}", "state=drain", f"reason={reason}")
    assert drained.returncode == 0, drained.stderr
    try:
        check = sr.shardwise(
            "cluster", "check", "--profile", str(sr.PROFILE), "--profile", str(sr.PROFILE_CI),
            extra_env=ACCOUNT,
        )  # fmt: skip
        row = next(line for line in check.stdout.splitlines() if f"node {node} is" in line)
        assert row.startswith("WARN") and f"reason: {reason}" in row
        status = sr.shardwise(
            "cluster", "status", "--run-dir", str(maintenance_run["run_dir"]), "--format", "json"
        )
        nodes = {n["node"]: n for n in sr.json_doc(status)["unavailable_nodes"]}
        assert nodes[node]["reason"] == reason and "drain" in nodes[node]["state"]
    finally:
        _scontrol("update", f"nodename={node}", "state=resume")


def test_a_qos_cap_of_2_with_jobs_5_fails_the_check_with_the_fix(cluster, slurm_qos_cap, tmp_path):
    qos = slurm_qos_cap(2)
    five = sr.overlay(tmp_path / "five", {"jobs": 5})
    proc = sr.shardwise(
        "cluster", "check", "--profile", str(sr.PROFILE), "--profile", str(sr.PROFILE_CI),
        "--profile", str(five), "--format", "json",
        extra_env={**ACCOUNT, "SHARDWISE_SLURM_QOS": qos},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = sr.json_doc(proc)
    jsonschema.validate(doc, _schema("cluster-check"))
    (jobs,) = [f for f in doc["findings"] if f["check"] == "jobs"]
    assert jobs["status"] == "FAIL"
    assert jobs["found"].startswith(f"jobs 5 is above the submit cap 2 (QOS {qos} ")
    assert jobs["fix"] == "jobs: 1"


def test_a_submission_refused_at_the_cap_shows_slurms_own_message(cluster, slurm_qos_cap, tmp_path):
    qos = slurm_qos_cap(2)
    fillers = []
    for _ in range(2):  # the cap is full before the run starts
        out = subprocess.run(
            ["sbatch", "--parsable", "--hold", f"--qos={qos}", "-t", "5", "--wrap", "true"],
            capture_output=True, text=True, check=True, cwd=tmp_path,
        )  # fmt: skip
        fillers.append(out.stdout.strip())
    try:
        configfile = sr.demo(tmp_path)
        cmd = sr.snakemake(
            tmp_path, configfile, sr.PROFILE, sr.PROFILE_CI,
            extra=("--shardwise-qos", qos, "--retries", "0", "--jobs", "5"),
        )  # fmt: skip
        proc = sr.run(cmd)
        log = proc.stdout + proc.stderr
        assert proc.returncode != 0
        assert "QOSMaxSubmitJobPerUserLimit" in log, log[-4000:]
        assert "Job violates accounting/QOS policy" in log
        shard_logs = list((tmp_path / "demo" / "run" / "logs" / "classify").glob("*.log"))
        assert shard_logs
        assert "QOSMaxSubmitJobPerUserLimit" in shard_logs[0].read_text()
    finally:
        subprocess.run(["scancel", *fillers], check=False)


def test_an_unknown_excluded_node_fails_the_check_and_the_overlay_fixes_it(cluster, tmp_path):
    bad = sr.overlay(tmp_path / "bad", {"shardwise-exclude-failed-nodes": "gpu-bad01,nosuchnode"})
    profiles = [
        "--profile",
        str(sr.PROFILE),
        "--profile",
        str(sr.PROFILE_CI),
        "--profile",
        str(bad),
    ]
    site = tmp_path / "site"
    proc = sr.shardwise("cluster", "check", *profiles, "--write-profile", str(site),
                        extra_env=ACCOUNT)  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("FAIL  exclude"))
    assert "nosuchnode" in row and "gpu-bad01" not in row
    assert "shardwise-exclude-failed-nodes: gpu-bad01" in (site / "config.yaml").read_text()
    fixed = sr.shardwise("cluster", "check", *profiles, "--profile", str(site), extra_env=ACCOUNT)
    assert fixed.returncode == 0, fixed.stdout


def test_a_run_with_an_unknown_excluded_node_shows_sbatchs_message(cluster, tmp_path):
    bad = sr.overlay(tmp_path / "bad", {"shardwise-exclude-failed-nodes": "nosuchnode"})
    configfile = sr.demo(tmp_path)
    cmd = sr.snakemake(tmp_path, configfile, sr.PROFILE, sr.PROFILE_CI, bad,
                       extra=("--retries", "0"))  # fmt: skip
    proc = sr.run(cmd)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Invalid node name specified" in log, log[-4000:]
    assert "Error in group classify (shards" in log


def test_the_production_profile_with_only_the_account_submits_here(cluster, tmp_path):
    configfile = sr.demo(tmp_path)
    log_path = tmp_path / "snakemake.log"
    proc = subprocess.Popen(
        sr.snakemake(tmp_path, configfile, sr.PROFILE),
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        env=sr.env(ACCOUNT),
    )
    try:
        sr.wait_for(
            lambda: (
                "has been submitted with SLURM jobid" in log_path.read_text()
                or proc.poll() is not None
            ),
            180,
            "the first submission",
        )
        log = log_path.read_text()
        assert "has been submitted with SLURM jobid" in log, log[-4000:]
        assert sr.squeue_of(tmp_path), "the submitted job is not in the queue"
    finally:
        proc.kill()  # faster than Ctrl-C with the production poll intervals; jobs go below
        proc.wait()
        sr.scancel_workdir(tmp_path)


def test_without_accounting_check_says_sacct_would_hang_and_the_cap_is_unknown(cluster, tmp_path):
    sacct = sr.overlay(tmp_path / "sacct", {"shardwise-status-command": "sacct"})
    off = subprocess.run(
        ["bash", str(cluster.cluster_sh), "start"],
        capture_output=True, text=True, timeout=600, check=False,
        env={**sr.env(), "SHARDWISE_SLURM_ACCOUNTING": "0"},
    )  # fmt: skip
    try:
        assert off.returncode == 0, off.stderr[-3000:]
        t0 = time.monotonic()
        proc = sr.shardwise(
            "cluster", "check", "--profile", str(sr.PROFILE), "--profile", str(sr.PROFILE_CI),
            "--profile", str(sacct), "--format", "json", extra_env=ACCOUNT,
        )  # fmt: skip
        took = time.monotonic() - t0
        doc = sr.json_doc(proc)
        jsonschema.validate(doc, _schema("cluster-check"))
        found = {f["check"]: f for f in doc["findings"]}
        assert found["status_command"]["status"] == "FAIL"
        assert "sacct would hang" in found["status_command"]["found"]
        assert found["status_command"]["fix"] == "shardwise-status-command: squeue"
        assert found["jobs"]["status"] == "WARN" and "cap is unknown" in found["jobs"]["found"]
        assert took < 60, f"check took {took:.0f} s without accounting"
    finally:
        back = subprocess.run(
            ["bash", str(cluster.cluster_sh), "start"],
            capture_output=True, text=True, timeout=600, check=False, env=sr.env(),
        )  # fmt: skip
        assert back.returncode == 0, back.stderr[-3000:]
