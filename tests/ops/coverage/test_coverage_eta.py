"""The coverage ETA against the measured finish of the same run: many small files, a few large.

Half of a demo run is labelled by snakemake (the local executor, 2 jobs at a time, as
the quick start runs it); coverage's ETA is read; the other half is labelled and
timed. The ETA is the work left at the pace of the finished shard jobs (start-up and
model loading included), checked exactly against the input files and Snakemake's
benchmarks; the labelling rate alone, which the ETA used to divide by, is shown beside it
and misses most of it on small files. Against the measured finish the band is wide: the
pace is the first half's, and a shared machine's load changes between the halves.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from shardwise.demo.corpus import DemoSize, write_demo
from shardwise.run import benchmarks

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]

#: (name, the demo's size, total shards): 30 files of ~20 kB; 6 files of ~600 kB.
CORPORA = [
    ("many small files", DemoSize(), 8),
    ("a few large files", DemoSize(files_per_category=1, docs_per_file=1000), 4),
]


def snakemake(config: Path, *targets: str) -> float:
    """Run the workflow (profiles/local) to ``targets``; its wall seconds."""
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
           "--configfile", str(config), "--profile", str(REPO / "profiles" / "local"),
           "--directory", str(config.parent), *targets]  # fmt: skip
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(config.parent)}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return time.monotonic() - t0


@pytest.mark.parametrize(("name", "size", "shards"), CORPORA, ids=[c[0] for c in CORPORA])
def test_the_eta_at_half_time_is_near_the_measured_finish(tmp_path, name, size, shards):
    config = write_demo(tmp_path / "demo", size)
    data = yaml.safe_load(config.read_text())
    data["sharding"]["total_shards"] = shards
    config.write_text(yaml.safe_dump(data))
    run_dir = Path(data["run_dir"])
    first = [str(run_dir / "shards" / f"{s}.done") for s in range(shards // 2)]
    snakemake(config, *first)
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "shardwise.cli", "coverage", "--run-dir", str(run_dir),
             "--format", "json"],
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    eta = doc["eta"]
    assert (eta["basis"], eta["jobs"], eta["gpus"]) == ("shard jobs", shards // 2, 2), eta
    # The ETA is the work left at the pace of the finished jobs: their input bytes over the
    # seconds Snakemake measured for them (start-up and model loading in), on the parallel
    # jobs. Read from the input files and the benchmarks, not from coverage's own sums.
    first_seconds = benchmarks.shard_seconds(run_dir)
    total = sum(p.stat().st_size for p in Path(data["input"]["uri"]).rglob("*") if p.is_file())
    pace = (total - eta["remaining"]) / sum(first_seconds.values())
    assert set(first_seconds) == set(range(shards // 2))
    assert eta["rate_per_gpu"] == pytest.approx(pace, rel=1e-6)
    assert eta["seconds"] == pytest.approx(eta["remaining"] / (pace * 2), abs=0.06)
    assert eta["labelling_seconds"] < eta["seconds"]  # what the old ETA left out
    wall = snakemake(config)  # the rest, and the report
    rest = range(shards // 2, shards)
    seconds = benchmarks.shard_seconds(run_dir)
    measured = sum(seconds[s] for s in rest) / eta["gpus"]
    print(
        f"\n{name}: ETA {eta['seconds']:.1f} s at the pace of {eta['jobs']} jobs "
        f"({eta['seconds_per_job']:.1f} s each); labelling alone {eta['labelling_seconds']:.1f} "
        f"s; the rest's jobs took {measured:.1f} s on {eta['gpus']} slots ({wall:.1f} s wall)",
        file=sys.stderr,
    )
    # Against the finish: the rest's jobs (their benchmarks, as if packed on the slots) and
    # the wall the operator waits. The pace is the first half's: on a machine whose load
    # changes between the halves (CI runs the SLURM suite beside this one: 5.7 s a job in
    # the first half, 9.1 s in the second, measured) no ETA can be closer than that change,
    # so the band is a factor of 4: it catches an ETA of the wrong kind (slots not divided
    # by, seconds as minutes), the exact checks above the rest.
    assert 0.25 * measured <= eta["seconds"] <= 4 * wall, (eta, measured, wall)
