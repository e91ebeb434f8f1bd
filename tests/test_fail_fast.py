"""Fail fast and say why where the operator looks (local executor, moto S3).

A ``text_field`` typo fails ``snakemake -n`` before anything is pinned (Parquet and
JSONL, local and S3); no credentials at all is one line; a failed job's own reason is
on the console; the first failures sharing one reason no retry can fix stop the run.
The SLURM executor's console is in ``tests/slurm/test_slurm_failed_jobs.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e import REPO, make_run, run_snakemake

from shardwise.run import plan, runjson

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def no_slurm_wait(monkeypatch):
    """These runs are local: a SLURM client that fails at once (no ~9 s plugin wait)."""
    monkeypatch.setenv("PATH", f"{REPO / 'tests' / 'slowstart'}:{os.environ['PATH']}")
    monkeypatch.setenv("SHARDWISE_SLOW_START_S", "0")


def keep_only(corpus: Path, suffix: str) -> None:
    """Leave one input format in the corpus."""
    for path in list(corpus.rglob("*.*")):
        if path.is_file() and not path.name.endswith(suffix):
            path.unlink()


def edit(config: Path, **sections: dict[str, Any]) -> None:
    cfg = yaml.safe_load(config.read_text())
    for name, values in sections.items():
        cfg[name] = {**cfg.get(name, {}), **values}
    config.write_text(yaml.safe_dump(cfg))


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".jsonl.zst"])
def test_a_text_field_typo_fails_the_dry_run_and_pins_nothing(tmp_path, demo_models, suffix):
    config = make_run(tmp_path, demo_models, total_shards=4)
    keep_only(tmp_path / "corpus", suffix)
    edit(config, input={"text_field": "txt"})
    proc = run_snakemake(config, "--dry-run", check=False)
    assert proc.returncode == 1, proc.stdout
    kind = "parquet" if suffix == ".parquet" else "jsonl"
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("shardwise: "))
    assert re.match(rf"shardwise: input.text_field 'txt' is in none of the \d sampled {kind}", line)
    assert str(tmp_path / "corpus") in line and suffix in line
    assert "fields found: id, text, url. Did you mean 'text'?" in line
    assert "Traceback" not in proc.stdout and 'File "' not in proc.stdout
    assert not (tmp_path / "run" / runjson.RUN_JSON).exists()
    assert not (tmp_path / "labels").exists()


@pytest.mark.s3
def test_on_s3_the_typo_fails_the_dry_run_and_no_credentials_is_one_line(
    tmp_path, demo_models, s3, monkeypatch
):
    from test_storage_s3_workflow import upload_tree, write_config

    from shardwise.demo.corpus import write_corpus

    write_corpus(tmp_path / "corpus")
    upload_tree(s3, tmp_path / "corpus", "corpus")
    config = write_config(tmp_path, s3, demo_models, total_shards=4)
    edit(config, input={"text_field": "body"})
    proc = run_snakemake(config, "--dry-run", check=False)
    assert proc.returncode == 1, proc.stdout
    assert f"in none of the 3 sampled parquet file(s) ({s3.url('corpus')}/" in proc.stdout
    assert f"in none of the 3 sampled jsonl file(s) ({s3.url('corpus')}/" in proc.stdout
    assert not s3.keys("labels/")  # nothing pinned in the bucket
    assert not (tmp_path / "run" / runjson.RUN_JSON).exists()

    edit(config, input={"text_field": "text"})
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    proc = run_snakemake(config, "--dry-run", check=False)
    assert proc.returncode == 1
    said = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert said[-1].startswith(f"shardwise: {s3.url('corpus')}: no S3 credentials found")
    assert "Traceback" not in proc.stdout and "botocore" not in proc.stdout
    plan = subprocess.run(
        [sys.executable, "-m", "shardwise.cli", "plan", "--configfile", str(config)],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert plan.returncode == 1
    [line] = plan.stderr.strip().splitlines()
    assert "no S3 credentials found" in line and "AWS_ACCESS_KEY_ID" in line


@pytest.mark.parametrize("stop_after", [2, 0])
def test_a_shared_failure_is_on_the_console_and_stops_the_run(tmp_path, demo_models, stop_after):
    shards = 6
    config = make_run(tmp_path, demo_models, total_shards=shards)
    # the sample off, so the typo reaches the jobs (as a field only some files lack would)
    edit(
        config, input={"text_field": "body", "sample_files": 0}, failures={"stop_after": stop_after}
    )
    proc = run_snakemake(config, "--keep-going", "--retries", "2", check=False)
    out = proc.stdout
    assert proc.returncode == 1
    reason = "input.text_field 'body' is in no row of any file; fields found: id, text, url."
    assert "message: None" not in out
    assert f"failed: {reason}" in out
    failed = sorted(int(p.name) for p in (tmp_path / "run" / "failures").iterdir())
    records = list((tmp_path / "run" / "failures").rglob("*.json"))
    assert (
        f"shard(s) failed in this run, for 1 reason(s):\nshardwise:   {len(failed)} (shards" in out
    )
    if stop_after:
        assert "shardwise: stopping the run: the first 2 shards to fail all failed" in out
        assert len(failed) < shards  # the rest never started
        assert len(records) == len(failed)  # and none was retried
    else:
        assert "stopping the run" not in out
        with_files = plan.nonempty_shards(plan.load(tmp_path / "run"))
        assert failed == sorted(with_files)
        assert len(records) == 3 * len(failed)  # keep-going, with its retries
