"""The two-site cell of ``bench/campaign.py --sites``: one campaign, two sites, one bucket.

Two sites on this machine, each a workflow with its own run directory and the local
executor on one core (its one "GPU slot"), label the demo corpus into one bucket of a
moto S3 server (``campaign.site`` a and b). Two runs:

* ``together``: both start at once and run to the end. Per site: wall time, shard jobs,
  slot use (the seconds its shard jobs ran, from Snakemake's benchmark files, over its wall
  time), files it labelled (its progress journals); files labelled by both (0), lease
  takeovers (markers with an epoch above 1: 0).
* ``a dies``: site a stops in a shard after its first file (the test gate), alive and
  renewing its lease; site b labels everything else and waits for that shard; then a is
  killed -9 with its job. Figures: seconds from the kill to b's takeover of the lease
  (the lease's epoch 2 in the bucket), to b's end, files labelled twice (0), takeovers (1).

Needs moto (the test dependencies), as the tests' S3 server does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLASSIFIERS = ("topic", "topic_nourl", "format", "format_nourl")


def start_store(base: Path) -> tuple[object, dict[str, str]]:
    """The tests' S3 server (moto, counting each request by key) in this process, and the
    environment the sites reach it with."""
    sys.path.insert(0, str(REPO / "tests"))
    from s3server import S3Server

    server = S3Server()
    server.start()
    port = server.port
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench-secret",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_SHARED_CREDENTIALS_FILE=str(base / "none"),
        AWS_CONFIG_FILE=str(base / "none"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    os.environ.update({k: env[k] for k in env if k.startswith("AWS_")})
    return server, env | {"SHARDWISE_BENCH_ENDPOINT": f"http://127.0.0.1:{port}"}


def _client(env: dict[str, str]):
    import boto3

    return boto3.client("s3", endpoint_url=env["SHARDWISE_BENCH_ENDPOINT"], region_name="us-east-1")


def prepare(base: Path, env: dict[str, str], bucket: str, files_per_category: int) -> None:
    """The demo corpus in a new ``bucket``."""
    from shardwise.demo.corpus import DemoSize, write_corpus

    size = DemoSize(
        files_per_category=files_per_category, docs_per_file=12, median_words=60, max_words=600
    )
    client = _client(env)
    client.create_bucket(Bucket=bucket)
    for path in write_corpus(base / "corpus", size):
        key = f"corpus/{path.relative_to(base / 'corpus').as_posix()}"
        client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())


def site_config(
    base: Path,
    env: dict[str, str],
    bucket: str,
    models: Path,
    site: str,
    *,
    shards: int,
    lease_seconds: float,
) -> Path:
    """One site's config (the demo's, ``demo.corpus.write_site_config``)."""
    from shardwise.demo.corpus import write_site_config

    storage = {"endpoint_url": env["SHARDWISE_BENCH_ENDPOINT"], "region": "us-east-1"}
    return write_site_config(
        base,
        site,
        bucket=bucket,
        storage=storage,
        models=models,
        total_shards=shards,
        lease_seconds=lease_seconds,
    )


def start_site(config: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """The site's workflow, one core, in its own process group (killed whole)."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(config.parent),
        "--configfile",
        str(config),
        "--cores",
        "1",
    ]
    out = log.open("w")
    return subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def site_figures(run_dir: Path, wall_s: float) -> dict:
    """A site's shard jobs and the seconds they ran (its slot's use)."""
    busy, jobs = 0.0, 0
    for tsv in sorted((run_dir / "benchmarks" / "classify").glob("*.tsv")):
        rows = tsv.read_text().splitlines()
        if len(rows) > 1:
            busy += float(rows[1].split("\t")[0])
            jobs += 1
    return {
        "wall_s": round(wall_s, 1),
        "shard_jobs": jobs,
        "busy_s": round(busy, 1),
        "slot_use": round(busy / wall_s, 3) if wall_s else 0.0,
    }


def markers(env: dict[str, str], bucket: str) -> list[dict]:
    """Every file marker of the campaign's output."""
    client = _client(env)
    found = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="labels/"):
        for obj in page.get("Contents", []):
            key = obj["Key"]
            if key.endswith(".done") and "/_campaign/" not in key:
                found.append(json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read()))
    return found


def together(base: Path, env: dict[str, str], models: Path, lease_seconds: float, server) -> dict:
    """Both sites from the start to the end of the campaign."""
    bucket = "sites-together"
    prepare(base, env, bucket, 2)
    configs = {
        s: site_config(base, env, bucket, models, s, shards=6, lease_seconds=lease_seconds)
        for s in "ab"
    }
    started = time.monotonic()
    procs = {s: start_site(c, env, base / f"together-{s}.log") for s, c in configs.items()}
    walls = {}
    for site, proc in procs.items():
        if proc.wait(timeout=1800) != 0:
            raise SystemExit(f"site {site} failed: see {base / f'together-{site}.log'}")
        walls[site] = time.monotonic() - started
    sites = {s: site_figures(base / f"run-{s}", walls[s]) for s in procs}
    return _summary(sites, markers(env, bucket), server, bucket)


def _summary(sites: dict[str, dict], found: list[dict], server, bucket: str) -> dict:
    """Per site the files its markers name; files whose labels were written more than once
    (PUTs of one sidecar key, counted by the server); lease takeovers (epochs above 1)."""
    for site, fig in sites.items():
        fig["files_labelled"] = sum(1 for m in found if m.get("site") == site)
    puts = Counter(
        r.key
        for r in server.log(bucket)
        if r.method == "PUT" and r.key.endswith(".labels.parquet") and r.status == 200
    )
    return {
        "sites": sites,
        "files": len(found),
        "files_labelled_twice": sum(1 for n in puts.values() if n > 1),
        "takeovers": sum(1 for m in found if (m.get("lease_epoch") or 1) > 1),
    }


def a_dies(base: Path, env: dict[str, str], models: Path, lease_seconds: float, server) -> dict:
    """Site a stops in a shard (alive), b waits for it; a is killed; b takes it over."""
    from shardwise.classify.gate import AFTER_ENV, GATE_ENV

    bucket = "sites-a-dies"
    prepare(base / "dies", env, bucket, 2)
    configs = {
        s: site_config(base / "dies", env, bucket, models, s, shards=3, lease_seconds=lease_seconds)
        for s in "ab"
    }
    gate = base / "dies" / "gate"
    env_a = env | {GATE_ENV: str(gate), AFTER_ENV: "1"}
    site_a = start_site(configs["a"], env_a, base / "dies" / "a.log")
    try:
        held = _wait_for(lambda: next(iter(gate.glob("*.waiting")), None), site_a)
        shard = int(held.name.split(".")[0])
        started = time.monotonic()
        site_b = start_site(configs["b"], env, base / "dies" / "b.log")
        awaiting = base / "dies" / "run-b" / "logs" / "await_lease" / f"{shard}.log"
        _wait_for(lambda: awaiting.exists() or None, site_b)
        killed = time.monotonic()
        os.killpg(site_a.pid, signal.SIGKILL)
        site_a.wait(timeout=60)
        _wait_for(lambda: _epoch(env, bucket, shard) >= 2 or None, site_b)
        moved = time.monotonic()
        if site_b.wait(timeout=1800) != 0:
            raise SystemExit(f"site b failed: see {base / 'dies' / 'b.log'}")
        ended = time.monotonic()
    finally:
        if site_a.poll() is None:
            os.killpg(site_a.pid, signal.SIGKILL)
    sites = {
        "a": site_figures(base / "dies" / "run-a", killed - started + 1e-9),
        "b": site_figures(base / "dies" / "run-b", ended - started),
    }
    cell = _summary(sites, markers(env, bucket), server, bucket)
    cell.update(
        {
            "shard": shard,
            "lease_seconds": lease_seconds,
            "death_to_takeover_s": round(moved - killed, 1),
            "death_to_end_s": round(ended - killed, 1),
        }
    )
    return cell


def _epoch(env: dict[str, str], bucket: str, shard: int) -> int:
    """The lease epoch of ``shard`` in the bucket now (0: no lease)."""
    try:
        head = _client(env).head_object(Bucket=bucket, Key=f"labels/_campaign/leases/{shard}.lease")
    except Exception:  # noqa: BLE001 - absent (released) or not yet there
        return 0
    return int(head.get("Metadata", {}).get("epoch", "0"))


def _wait_for(found, proc: subprocess.Popen, timeout: float = 900):
    """Poll ``found()`` until it returns something, or fail when ``proc`` ended first."""
    deadline = time.monotonic() + timeout
    while (value := found()) is None:
        if proc.poll() is not None:
            raise SystemExit("a site ended before the event the cell waits for")
        if time.monotonic() > deadline:
            raise SystemExit(f"no event after {timeout} s")
        time.sleep(0.2)
    return value


def run_cell(base: Path, lease_seconds: float) -> dict:
    """Both runs of the two-site cell."""
    server, env = start_store(base)
    try:
        models = prepare_models(base)
        pair = together(base / "together", env, models, 30.0, server)
        return {
            "together": pair | {"lease_seconds": 30.0},
            "a_dies": a_dies(base, env, models, lease_seconds, server),
        }
    finally:
        server.stop()


def prepare_models(base: Path) -> Path:
    """The four tiny classifiers, once for both runs."""
    from shardwise.demo.corpus import CATEGORIES, DemoSize, _records
    from shardwise.demo.tinymodels import build_weborganizer_demo_models

    size = DemoSize(files_per_category=2, docs_per_file=12, median_words=60, max_words=600)
    sample = [r["text"] for s, c, _ in CATEGORIES for r in _records(s, c, 0, size, 0)]
    paths = build_weborganizer_demo_models(base / "models", sample)
    return Path(paths["topic"]).parent


def print_cell(cell: dict) -> None:
    """The cell as lines."""
    for name in ("together", "a_dies"):
        run = cell[name]
        print(
            f"{name}: {run['files']} files, labelled twice {run['files_labelled_twice']}, "
            f"lease takeovers {run['takeovers']}"
        )
        for site, fig in run["sites"].items():
            print(
                f"  site {site}: wall {fig['wall_s']} s, {fig['shard_jobs']} shard job(s), "
                f"slot use {fig['slot_use']:.0%}, {fig['files_labelled']} file(s) labelled"
            )
    dies = cell["a_dies"]
    print(
        f"a_dies: shard {dies['shard']} moved {dies['death_to_takeover_s']} s after site a "
        f"was killed (lease {dies['lease_seconds']:g} s); site b ended "
        f"{dies['death_to_end_s']} s after it"
    )
