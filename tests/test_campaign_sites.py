"""Two sites, one campaign: each with its own run directory and the local executor on one
core, labelling one corpus into one bucket (moto) at the same time. Every file labelled
once, by one site (its marker names it), both sites labelling part, each site's
``verify --complete`` OK; a site killed -9 has its shards finished by the other after
the lease runs out; a store that ignores If-None-Match is refused."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e import SMALL, Gate, gated_shardwise, run_snakemake, snakemake_cmd, wait_until

from shardwise.demo.corpus import write_corpus, write_site_config
from shardwise.store.lease import Leases
from shardwise.store.location import Location

pytestmark = [pytest.mark.slow, pytest.mark.s3]


def _corpus(s3: Any, tmp_path: Path) -> None:
    write_corpus(tmp_path / "corpus", SMALL)
    client = s3.client()
    for path in sorted((tmp_path / "corpus").rglob("*")):
        if path.is_file():
            key = f"corpus/{path.relative_to(tmp_path / 'corpus').as_posix()}"
            client.put_object(Bucket=s3.name, Key=key, Body=path.read_bytes())


def _site(
    tmp_path: Path, s3: Any, models: Path, site: str, lease_seconds: float, shards: int = 6
) -> Path:
    """One site's config (the demo's): its own run directory, the shared bucket."""
    return write_site_config(
        tmp_path,
        site,
        bucket=s3.name,
        storage=s3.storage_config(),
        models=models,
        total_shards=shards,
        lease_seconds=lease_seconds,
    )


def _counting_tokens(config: Path, models: Path) -> Path:
    """The site's config with token counts kept (``select`` weighs by tokens)."""
    data = yaml.safe_load(config.read_text())
    data["domains"] = {**data.get("domains", {}), "tokenizer": str(models / "topic")}
    config.write_text(yaml.safe_dump(data))
    return config


def _start(config: Path, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    env = env or dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    cmd = snakemake_cmd(config, cores=1)  # one core per site
    return subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def _markers(s3: Any) -> dict[str, dict]:
    labels = Location(s3.url("labels"), s3.options())
    return {
        rel: json.loads(labels.read_bytes(rel))
        for rel, _ in labels.list_files()
        if rel.endswith(".done") and not rel.startswith("_campaign/")
    }


def _verify(config: Path) -> subprocess.CompletedProcess:
    run_dir = yaml.safe_load(config.read_text())["run_dir"]
    cmd = [sys.executable, "-m", "shardwise.cli", "verify", "--run-dir", run_dir, "--complete"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)


def test_two_sites_label_one_campaign_each_file_once(tmp_path, s3, demo_models) -> None:
    _corpus(s3, tmp_path)
    configs = [
        _counting_tokens(_site(tmp_path, s3, demo_models, name, 30), demo_models)
        for name in ("a", "b")
    ]
    logs = [tmp_path / f"site-{n}.log" for n in ("a", "b")]
    procs = [_start(c, log) for c, log in zip(configs, logs, strict=True)]
    for proc, log in zip(procs, logs, strict=True):
        assert proc.wait(timeout=900) == 0, log.read_text()[-5000:]
    markers = _markers(s3)
    files = [p for p in (tmp_path / "corpus").rglob("*") if p.is_file()]
    assert len(markers) == len(files)
    by_site = Counter(m["site"] for m in markers.values())
    assert set(by_site) == {"a", "b"}, by_site  # both labelled part of it
    assert all(m["lease_epoch"] == 1 for m in markers.values())  # no takeover needed
    puts = Counter(
        r.key
        for r in s3.server.log(s3.name)
        if r.method == "PUT" and r.key.endswith(".labels.parquet") and r.status == 200
    )
    assert len(puts) == len(files) and set(puts.values()) == {1}, puts  # each labelled once
    labels = Location(s3.url("labels"), s3.options())
    for rel, marker in markers.items():  # the stats come from the job the marker names
        stats = json.loads(labels.read_bytes(rel.removesuffix(".done") + ".stats.json"))
        assert stats["shard"] == marker["shard"]
    assert Leases(labels, 30).all_seen() == []  # every lease released
    for config in configs:
        proc = _verify(config)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        sites = ", ".join(f"site {s} {n}" for s, n in sorted(by_site.items()))
        assert f"labelled by {sites}" in proc.stdout
    cmd = [sys.executable, "-m", "shardwise.cli", "coverage", "--run-dir", str(tmp_path / "run-b")]
    shown = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    for site, labelled in by_site.items():
        mine = " (this site)" if site == "b" else ""
        assert f"site {site}{mine}: " in shown, shown
        assert f"({labelled} file(s) labelled), 0 live job(s)" in shown
    rerun = run_snakemake(configs[0], "--cores", "1")
    assert "no other site holds a shard now" in rerun.stdout
    _a_site_that_labelled_nothing_answers_for_the_campaign(tmp_path, s3, demo_models)


def _a_site_that_labelled_nothing_answers_for_the_campaign(
    tmp_path: Path, s3: Any, models: Path
) -> None:
    """Site c joins the finished campaign: its plan brings every shard in (no job runs), and
    its coverage, verify --complete, domains and select answer for the whole campaign
    (issue 63), from the markers and summaries the other sites' jobs kept in the bucket."""
    config = _counting_tokens(_site(tmp_path, s3, models, "c", 30), models)
    run_dir = Path(yaml.safe_load(config.read_text())["run_dir"])
    planned = run_snakemake(config, "--cores", "1")
    said = r"brought in from the bucket (\d+) shard\(s\) other sites finished"
    brought = re.search(said, planned.stdout)
    assert brought is not None and int(brought.group(1)) >= 1, planned.stdout[-3000:]
    assert "rule classify" not in planned.stdout, planned.stdout[-3000:]  # no shard job

    def cli(*argv: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "shardwise.cli", *argv, "--run-dir", str(run_dir)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)

    shown = cli("coverage", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["shards_done"] == doc["shards_total"] == 6
    assert doc["tasks_done"] == doc["tasks_total"] > 0
    assert doc["campaign"]["site"] == "c"
    assert cli("verify", "--complete").returncode == 0
    domains = cli("domains", "--classifier", "topic", "--format", "json")
    assert domains.returncode == 0, domains.stderr
    estimate = json.loads(domains.stdout)
    assert estimate["percent_done"] == 100.0 and estimate["shards_done"] == 6
    label = estimate["cells"][0]["labels"]["topic"]  # the commonest topic
    weights = tmp_path / "weights.json"
    weights.write_text(json.dumps([{"domain": label, "weight": 1.0}]))
    chosen = cli("select", "--name", "c1", "--weights", str(weights), "--tokens", "2K",
                 "--classifier", "topic")  # fmt: skip
    assert chosen.returncode == 0, chosen.stdout[-2000:] + chosen.stderr[-2000:]
    assert (run_dir / "selections" / "c1").is_dir()


def test_a_store_that_ignores_if_none_match_is_refused(tmp_path, s3, demo_models) -> None:
    _corpus(s3, tmp_path)
    config = _site(tmp_path, s3, demo_models, "a", 30)
    data = yaml.safe_load(config.read_text())
    del data["campaign"]["site"]  # named on the command line instead, one file for all sites
    config.write_text(yaml.safe_dump(data))
    s3.server.honour_conditional_writes = False
    proc = run_snakemake(config, "--cores", "1", "--config", "campaign={site: a}", check=False)
    assert proc.returncode != 0
    assert "config campaign.site 'a': the output store" in proc.stdout
    assert "cannot keep shard leases (a second If-None-Match: * create" in proc.stdout
    assert not s3.keys("labels/_campaign/leases")


def test_a_site_killed_has_its_shard_finished_by_the_other_only_after_its_lease(
    tmp_path, s3, demo_models
) -> None:
    """Site a labels one file of a shard and stops there (alive, renewing); site b labels
    every other shard first (the await job has the lowest priority) and then waits: a
    live lease is not taken, however long. Then a is
    killed -9, its job too: b takes the shard over once the lease runs out, no command."""
    _corpus(s3, tmp_path)
    lease_seconds = 3
    # three shards of 12 files: the shard a stops in has files left after its first
    config_a, config_b = (_site(tmp_path, s3, demo_models, n, lease_seconds, 3) for n in "ab")
    gate = Gate(tmp_path / "gate", after_files=1)
    env_a = gated_shardwise(tmp_path / "bin-a", tmp_path / "ledger-a", gate)
    site_a = _start(config_a, tmp_path / "site-a.log", env_a)
    try:
        (held,) = gate.wait(1, alive=lambda: site_a.poll() is None)
        site_b = _start(config_b, tmp_path / "site-b.log")
        labels = Location(s3.url("labels"), s3.options())
        leases = Leases(labels, lease_seconds)
        # a is slow but alive: its lease is renewed every second; after two whole leases
        # (six renewals) b has labelled the rest and is still waiting for this one
        awaiting = tmp_path / "run-b" / "logs" / "await_lease" / f"{held}.log"
        wait_until(awaiting.exists, "site b waiting for the held shard", timeout=600)
        wait_until(lambda: leases.seen(held).lease.renewal >= 6, "site a renewing its lease")
        seen = leases.seen(held)
        assert seen.lease.site == "a" and seen.lease.epoch == 1 and site_b.poll() is None
        killed = time.monotonic()
        os.killpg(site_a.pid, signal.SIGKILL)  # the workflow and its job
        site_a.wait(timeout=60)
        assert site_b.wait(timeout=600) == 0, (tmp_path / "site-b.log").read_text()[-5000:]
        moved_s = time.monotonic() - killed
    finally:
        for proc in (site_a,):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    markers = _markers(s3)
    files = [p for p in (tmp_path / "corpus").rglob("*") if p.is_file()]
    assert len(markers) == len(files)
    of_held = sorted((m["site"], m["lease_epoch"]) for m in markers.values() if m["shard"] == held)
    assert of_held[0] == ("a", 1) and ("b", 2) in of_held, of_held  # a's file kept, b the rest
    log_b = (tmp_path / "site-b.log").read_text()
    assert f"shard {held}: site 'a'" in log_b and "lease ran out" in log_b
    print(
        f"shard {held} moved to site b {moved_s:.1f} s after site a was killed "
        f"(lease {lease_seconds} s)"
    )
    assert moved_s < 120
    proc = _verify(config_b)
    assert proc.returncode == 0, proc.stdout + proc.stderr
