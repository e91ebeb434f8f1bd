"""Time `shardwise coverage` on a run the size of a real one.

Builds (once, under bench/out/coverage/) a synthetic run directory of 56,514 source
files in 3,000 shards, half the shards done, with a `<rel>.stats.json` and `<rel>.done`
per done file (plus a few done files inside unfinished shards), then times
load_state + compute + format_table in-process, cold and warm, and the whole CLI in a
fresh interpreter. Prints the figures; exits 1 if the warm in-process time is over 2 s.

    python bench/coverage.py [--rebuild] [--report] [--files 56514 --shards 3000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage.render import format_table
from shardwise.run import plan
from shardwise.run.runjson import RunMeta, fingerprint
from shardwise.run.sharding import shard_for_task

FILES = 56_514
SHARDS = 3_000
BUDGET_S = 2.0
OUT = Path(__file__).resolve().parent / "out" / "coverage"
TOPICS = [
    "science", "health", "finance", "sports", "politics", "software", "travel", "food",
    "history", "religion", "fashion", "games", "home", "literature", "law", "education",
    "transport", "entertainment", "industrial", "adult", "art", "crime", "electronics",
    "social",
]  # fmt: skip
DEVICES = [("NVIDIA H100 80GB HBM3", 2600.0), ("NVIDIA A100-SXM4-80GB", 1500.0)]


def build(root: Path, n_files: int = FILES, n_shards: int = SHARDS) -> None:
    """Write run.json, plan.parquet, markers and output files under ``root``."""
    rng = np.random.default_rng(7)
    if root.exists():
        shutil.rmtree(root)
    run_dir, output = root / "run", root / "output"
    (run_dir / "shards").mkdir(parents=True, exist_ok=True)
    output.mkdir(parents=True, exist_ok=True)
    files = sorted(
        f"{source}/{TOPICS[i % len(TOPICS)]}/part-{i:06d}.jsonl.zst"
        for i, source in zip(
            range(n_files), rng.choice(["cc", "cc", "cc", "wiki", "books"], n_files), strict=True
        )
    )
    sizes = rng.lognormal(mean=np.log(40e6), sigma=0.5, size=n_files).astype(np.int64)
    shards = np.array([shard_for_task(f, n_shards) for f in files], dtype=np.int64)
    categories = ["/".join(f.split("/")[:2]) for f in files]
    table = pa.table(
        {
            "file": files,
            "size": pa.array(sizes, pa.int64()),
            "task_id": files,
            "shard": shards,
            "category": categories,
            "identity": pa.nulls(n_files, pa.string()),
        }
    ).cast(plan.SCHEMA)
    plan.save(run_dir, table, plan.summarize(table, n_shards, 0, 1))  # the planner's writer
    meta = RunMeta.new(
        total_shards=n_shards, minimum_shard_index=0, files_per_task=1,
        input_uri=str(root / "corpus"), output_uri=str(output), task_count=n_files,
        fingerprint=fingerprint(files), classifiers=[("topic", "models/topic", "url_text")],
    )  # fmt: skip
    (run_dir / "run.json").write_bytes(meta.to_json())
    done_shards = set(rng.choice(n_shards, n_shards // 2, replace=False).tolist())
    start = datetime(2026, 1, 1, tzinfo=UTC)
    by_shard: dict[int, list[int]] = {}
    for i, s in enumerate(shards.tolist()):
        by_shard.setdefault(s, []).append(i)
    order = sorted(done_shards)
    rng.shuffle(order)
    for rank, shard in enumerate(order):
        members = by_shard.get(shard, [])
        device, speed = DEVICES[shard % 2]
        finished = start + timedelta(seconds=rank * 60 + float(rng.uniform(0, 60)))
        docs_total = 0
        for i in members:
            docs = int(sizes[i] / 2000)
            seconds = docs / (speed * rng.lognormal(0, 0.15))
            _write_file_outputs(
                output, files[i], shard, docs, seconds, device, finished, int(sizes[i])
            )
            docs_total += docs
        (run_dir / "shards" / f"{shard}.done").write_text(
            json.dumps({"shard": shard, "total_shards": n_shards, "minimum_shard_index": 0,
                        "tasks": len(members), "files": len(members), "docs": docs_total,
                        "finished_at": finished.isoformat().replace("+00:00", "Z")})
        )  # fmt: skip
    # A few files done inside shards still running.
    running = sorted(set(range(n_shards)) - done_shards)
    for shard in rng.choice(running, min(200, len(running) // 4), replace=False).tolist():
        members = by_shard.get(shard, [])
        for i in rng.choice(members, min(3, len(members)), replace=False).tolist():
            _write_file_outputs(
                output,
                files[i],
                shard,
                int(sizes[i] / 2000),
                15.0,
                DEVICES[0][0],
                start + timedelta(days=1),
                int(sizes[i]),
            )
    (root / "BUILT").write_text(f"{n_files} {n_shards}\n")


def _write_file_outputs(
    output: Path,
    rel: str,
    shard: int,
    docs: int,
    seconds: float,
    device: str,
    finished: datetime,
    size: int,
) -> None:
    target = output / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    stamp = finished.isoformat().replace("+00:00", "Z")
    stats = {"file": rel, "task_id": rel, "shard": shard, "docs": docs, "tokens": docs * 700,
             "seconds": seconds, "docs_per_s": docs / seconds,
             "tokens_per_s": docs * 700 / seconds, "device": "cuda:0", "device_name": device,
             "dtype": "bfloat16", "slurm_job_id": "123", "hostname": "gpu001",
             "versions": {"shardwise": "0.1.0"}, "finished_at": stamp, "bytes": size,
             "engine": {"batch_tokens": 65536}}  # fmt: skip
    Path(f"{target}.stats.json").write_text(json.dumps(stats))
    Path(f"{target}.done").write_text(
        json.dumps(
            {"file": rel, "task_id": rel, "shard": shard, "rows": docs, "finished_at": stamp}
        )
    )


def timed_report(run_dir: Path) -> tuple[float, float, str]:
    """Wall and CPU seconds for load_state + compute + format_table, and the table.

    CPU time is printed too because a shared 2-core box makes wall time noisy.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    state = coverage.load_state(run_dir)
    table = format_table(coverage.compute(state, gpus=8))
    return time.perf_counter() - t0, time.process_time() - c0, table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--report", action="store_true", help="also time `report` (PNG+HTML)")
    parser.add_argument("--files", type=int, default=FILES, help="source files in the run")
    parser.add_argument("--shards", type=int, default=SHARDS, help="logical shards")
    parser.add_argument("--dir", type=Path, default=OUT, help="where the run is built")
    args = parser.parse_args()
    out = args.dir.absolute()
    built = out / "BUILT"
    if args.rebuild or not built.exists() or built.read_text() != f"{args.files} {args.shards}\n":
        t0 = time.perf_counter()
        build(out, args.files, args.shards)
        print(f"built synthetic run in {time.perf_counter() - t0:.1f} s: {out}")
    run_dir = out / "run"
    cold, cold_cpu, table = timed_report(run_dir)
    runs = [timed_report(run_dir) for _ in range(3)]
    warm, warm_cpu = min(r[0] for r in runs), min(r[1] for r in runs)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "shardwise.cli", "coverage", "--run-dir", str(run_dir),
         "--gpus", "8"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    process = time.perf_counter() - t0
    print(table)
    print()
    print(f"coverage table, {args.files:,} files / {args.shards:,} shards, half done:")
    print(f"  in-process first call  {cold:.3f} s wall, {cold_cpu:.3f} s CPU")
    print(f"  in-process warm (min3) {warm:.3f} s wall, {warm_cpu:.3f} s CPU")
    print(f"  fresh interpreter, CLI {process:.3f} s (includes imports)")
    if args.report:
        from shardwise.ops.report import page as report

        t0 = time.perf_counter()
        state = coverage.load_state(run_dir)
        now = float(np.nanmax(state.markers.finished_at)) + 120  # "now" = just after the last shard
        report.write_report(state, coverage.compute(state, gpus=8), out / "report.html", now=now)
        print(f"  report (HTML+PNG)      {time.perf_counter() - t0:.3f} s -> {out / 'report.png'}")
    return 0 if warm < BUDGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
