"""End to end on the local executor: real snakemake, real files, tiny real models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from e2e import (
    Gate,
    assert_labelled_exactly_once,
    input_files,
    make_run,
    run_snakemake,
    snakemake_cmd,
)

from shardwise.cli.main import main
from shardwise.run import markers

pytestmark = pytest.mark.slow


def test_run_labels_every_file_then_second_run_does_nothing(tmp_path, demo_models, capsys):
    config = make_run(tmp_path, demo_models)
    dry = run_snakemake(config, "--dry-run")
    assert "shards" in dry.stdout and "cc/science" in dry.stdout  # coverage report
    run_snakemake(config)
    rows = assert_labelled_exactly_once(
        tmp_path / "corpus", tmp_path / "labels", ("topic", "topic_nourl", "format", "format_nourl")
    )
    assert rows == 12 * len(input_files(tmp_path / "corpus"))
    assert markers.done_shards(tmp_path / "run") == set(range(6))
    stats = json.loads(
        (tmp_path / "labels" / "cc" / "science" / "part-0000.parquet.stats.json").read_text()
    )
    assert stats["device"] and stats["versions"]["torch"]
    # each shard's one job records its start-up on its first file only (the walltime floor's)
    every = [json.loads(p.read_text()) for p in (tmp_path / "labels").rglob("*.stats.json")]
    started = sorted(s["shard"] for s in every if s.get("startup_s") is not None)
    assert started == sorted({s["shard"] for s in every}), started
    assert all(s["startup_s"] > 0 for s in every if s.get("startup_s") is not None)
    again = run_snakemake(config)
    assert "Nothing to be done" in again.stdout
    assert main(["coverage", "--run-dir", str(tmp_path / "run"), "--format", "json"]) == 0
    cov = json.loads(capsys.readouterr().out)
    assert cov["shards_done"] == cov["shards_total"] == 6
    assert cov["tasks_done"] == cov["tasks_total"] == len(input_files(tmp_path / "corpus"))


@pytest.mark.race
def test_killed_run_restarts_and_labels_each_row_exactly_once(tmp_path, demo_models):
    config = make_run(tmp_path, demo_models, total_shards=12)
    labels = tmp_path / "labels"
    gate = Gate(tmp_path / "gate", after_files=1)  # the first job stops after one file
    proc = subprocess.Popen(
        snakemake_cmd(config, "--cores", "1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **gate.env()},
    )
    gate.wait(1, alive=lambda: proc.poll() is None)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole run dies at once, mid-way
    proc.wait()
    done_before = {p: p.stat().st_mtime_ns for p in labels.rglob("*.done")}
    assert done_before, "nothing finished before the kill"
    assert markers.done_shards(tmp_path / "run") != set(range(12))
    # After a kill -9 Snakemake may still hold its lock: `--unlock` clears it either way.
    run_snakemake(config, "--unlock")
    run_snakemake(config, "--rerun-incomplete")
    assert_labelled_exactly_once(tmp_path / "corpus", labels)
    for path, mtime in done_before.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was labelled twice"
    assert markers.done_shards(tmp_path / "run") == set(range(12))


def test_corrupt_file_fails_its_shard_after_the_others_and_is_recorded(tmp_path, demo_models):
    config = make_run(tmp_path, demo_models, total_shards=3)
    bad = tmp_path / "corpus" / "cc" / "science" / "part-0000.parquet"
    bad.write_bytes(b"PAR1 garbage, not a parquet file")
    proc = run_snakemake(config, "--keep-going", check=False)
    assert proc.returncode != 0
    labels = tmp_path / "labels"
    good = [r for r in input_files(tmp_path / "corpus") if r != "cc/science/part-0000.parquet"]
    for rel in good:
        assert (labels / f"{rel}.done").exists(), rel
    assert not (labels / "cc/science/part-0000.parquet.done").exists()
    assert not (labels / "cc/science/part-0000.parquet.labels.parquet").exists()
    records = list((tmp_path / "run" / "failures").rglob("*.json"))
    assert records
    record = json.loads(records[0].read_text())
    assert record["failed"][0]["file"] == "cc/science/part-0000.parquet"
    assert "cannot read parquet file" in record["failed"][0]["error"]
    logs = "".join(p.read_text() for p in (tmp_path / "run" / "logs").rglob("*.log"))
    assert "cc/science/part-0000.parquet" in logs
    assert "shardwise quarantine --run-dir" in logs
    # the console names the file and the way out; one bad file never stops a run
    shard = record["shard"]
    assert f"message: shard {shard} failed: 1 of " in proc.stdout
    assert "part-0000.parquet: cannot read parquet file" in proc.stdout
    assert "`shardwise quarantine --run-dir" in proc.stdout
    assert "stopping the run" not in proc.stdout


def test_a_dry_run_reports_coverage_while_a_real_run_holds_the_run_dir(tmp_path, demo_models):
    """The coverage report is a dry run: it must work while the real run is going."""
    config = make_run(tmp_path, demo_models)
    run_snakemake(config, "--dry-run")  # plans the run directory
    holder = subprocess.Popen(  # a second process holds the lock, as a live run does
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from shardwise.planner.runlock import "
            "lock_run_dir; lock_run_dir(Path(sys.argv[1])); print('locked', flush=True); "
            "time.sleep(600)",
            str(tmp_path / "run"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        dry = run_snakemake(config, "--dry-run", check=False)
        assert dry.returncode == 0, dry.stdout[-3000:]
        assert "coverage of run" in dry.stdout
        real = run_snakemake(config, check=False)
        assert real.returncode != 0 and "is in use by" in real.stdout
    finally:
        holder.kill()
        holder.wait()
