"""One campaign, two sites: one on the SLURM test cluster (the production profile, two
shards per job), one the local executor on one core, one moto bucket, started together.

The SLURM site's shard jobs run on the cluster's node and take their leases from there;
the local site's jobs on this host. Every file is labelled once (one sidecar PUT per key,
one holder in each marker), both sites label part of it, every lease is released, and
``verify --complete`` is OK from each site's run directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from e2e import SMALL, snakemake_cmd

from shardwise.demo.corpus import write_corpus, write_site_config
from shardwise.store.lease import Leases
from shardwise.store.location import Location

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.s3]

REPO = Path(__file__).resolve().parents[2]
PROFILES = (REPO / "profiles" / "slurm", REPO / "tests" / "slurm" / "profile-ci")


def _env() -> dict[str, str]:
    """The submitting environment: the venv first on PATH (jobs inherit it), no SLURM_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=_env(), start_new_session=True
    )


def test_a_slurm_site_and_a_local_site_label_one_campaign_each_file_once(
    tmp_path: Path, s3: Any, demo_models: Path, slurm_cluster: Any
) -> None:
    for path in write_corpus(tmp_path / "corpus", SMALL):
        s3.put(f"corpus/{path.relative_to(tmp_path / 'corpus').as_posix()}", path.read_bytes())
    configs = {
        site: write_site_config(
            tmp_path,
            site,
            bucket=s3.name,
            storage=s3.storage_config(),
            models=demo_models,
            total_shards=6,
            lease_seconds=30,
        )
        for site in ("slurm", "local")
    }
    profiles = [arg for profile in PROFILES for arg in ("--profile", str(profile))]
    slurm_cmd = snakemake_cmd(configs["slurm"], *profiles, cores=None)  # the profiles' caps
    local_cmd = snakemake_cmd(configs["local"], cores=1)
    logs = {site: tmp_path / f"site-{site}.log" for site in configs}
    with slurm_cluster.exclusive():
        procs = {
            "slurm": _start(slurm_cmd, logs["slurm"]),
            "local": _start(local_cmd, logs["local"]),
        }
        for site, proc in procs.items():
            assert proc.wait(timeout=900) == 0, logs[site].read_text()[-5000:]
    slurm_log = logs["slurm"].read_text()
    assert "SLURM run ID" in slurm_log, slurm_log[-3000:]  # the cluster ran its jobs
    labels = Location(s3.url("labels"), s3.options())
    markers = {
        rel: json.loads(labels.read_bytes(rel))
        for rel, _ in labels.list_files()
        if rel.endswith(".done") and not rel.startswith("_campaign/")
    }
    files = [p for p in (tmp_path / "corpus").rglob("*") if p.is_file()]
    assert len(markers) == len(files)
    by_site = Counter(m["site"] for m in markers.values())
    print(f"files labelled per site: {dict(by_site)}", file=sys.stderr)
    assert set(by_site) == {"slurm", "local"}, by_site  # both labelled part of it
    puts = Counter(
        r.key
        for r in s3.server.log(s3.name)
        if r.method == "PUT" and r.key.endswith(".labels.parquet") and r.status == 200
    )
    assert len(puts) == len(files) and set(puts.values()) == {1}, puts  # each labelled once
    assert Leases(labels, 30).all_seen() == []  # every lease released
    for site in configs:
        run_dir = str(tmp_path / f"run-{site}")
        cmd = [sys.executable, "-m", "shardwise.cli", "verify", "--run-dir", run_dir, "--complete"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        sites = ", ".join(f"site {s} {n}" for s, n in sorted(by_site.items()))
        assert f"labelled by {sites}" in proc.stdout
