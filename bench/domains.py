"""Time `shardwise domains` (and `shardwise coverage`) on a run the size of a real one.

Builds (once, under bench/out/domains/) the coverage benchmark's run (56,514 source
files in 3,000 shards, half the shards done; see bench/coverage.py), then gives every
done file realistic WebOrganizer label counts: ~20k documents per file drawn over the
24 x 24 topic x format cells from a per-category distribution (and again for the no-URL
pair), written into its `.stats.json` (`label_counts`, as the jobs write it) and into
one summary per done shard (`summaries/<shard>.arrow`, built by `summaries.build`); each
done shard's marker gets the per-file throughput fields (`file_stats`), as jobs write it.

Then times, as fresh CLI calls (a new interpreter each, imports included):
`shardwise domains` (default view: topic x format), `--classifier topic`, `--format
json`, and `shardwise coverage` on the same run (whose stats now carry label counts).
Prints the figures; exits 1 if the default `shardwise domains` call is over 2 s.

    python bench/domains.py [--rebuild] [--files 56514 --shards 3000]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from shardwise.run import filestats, summaries
from shardwise.run.labelcounts import LabelCounts, pair_key
from shardwise.store.atomic import write_atomic

BUDGET_S = 2.0
OUT = Path(__file__).resolve().parent / "out" / "domains"
LABELS = json.loads(
    (Path(__file__).resolve().parent.parent / "src/shardwise/data/weborganizer-labels.json")
    .read_text()
)  # fmt: skip
TOPICS, FORMATS = LABELS["topic"], LABELS["format"]


def _coverage_bench():
    """bench/coverage.py as a module (its run layout is reused as is)."""
    spec = importlib.util.spec_from_file_location(
        "bench_coverage", Path(__file__).with_name("coverage.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _counts(rng, mean: np.ndarray, docs: int, cell_len: np.ndarray) -> dict:
    """One file's label_counts for a pair (topic, format) drawn around ``mean``."""
    p = rng.dirichlet(40.0 * mean + 1e-3)
    d = rng.multinomial(docs, p).reshape(len(TOPICS), len(FORMATS))
    b = (d * cell_len.reshape(d.shape) * rng.lognormal(0, 0.3, d.shape)).astype(np.int64)
    pair = {}
    for i, j in zip(*np.nonzero(d), strict=True):
        pair.setdefault(TOPICS[i], {})[FORMATS[j]] = [int(d[i, j]), int(b[i, j])]
    topic = {TOPICS[i]: [int(d[i].sum()), int(b[i].sum())] for i in np.flatnonzero(d.sum(1))}
    fmt = {FORMATS[j]: [int(d[:, j].sum()), int(b[:, j].sum())]
           for j in np.flatnonzero(d.sum(0))}  # fmt: skip
    return {"pair": pair, "topic": topic, "format": fmt, "docs": docs, "bytes": int(b.sum())}


def build(root: Path, n_files: int, n_shards: int) -> dict[str, float]:
    """The coverage bench's run, plus label counts in stats and one summary per shard."""
    covbench = _coverage_bench()
    covbench.build(root, n_files, n_shards)
    run_dir, output = root / "run", root / "output"
    import pyarrow.parquet as pq

    plan = pq.read_table(run_dir / "plan.parquet").to_pydict()
    rng = np.random.default_rng(12)
    categories = sorted(set(plan["category"]))
    n_cells = len(TOPICS) * len(FORMATS)
    means = {c: rng.dirichlet(np.full(n_cells, 0.3)) for c in categories}
    cell_len = np.tile(rng.lognormal(np.log(2000), 0.5, len(FORMATS)), len(TOPICS))
    by_shard: dict[int, list[int]] = {}
    for i, s in enumerate(plan["shard"]):
        by_shard.setdefault(s, []).append(i)
    done = sorted(int(p.stem) for p in (run_dir / "shards").glob("*.done"))
    nonzero = []
    for shard in done:
        counts, file_stats = {}, {}
        for i in by_shard.get(shard, []):
            rel, docs = plan["file"][i], int(plan["size"][i] / 2000)
            url = _counts(rng, means[plan["category"][i]], docs, cell_len)
            nourl = _counts(rng, means[plan["category"][i]], docs, cell_len)
            nonzero.append(len(url["pair"]) and sum(len(r) for r in url["pair"].values()))
            lc = {
                "format_version": 1,
                "docs": docs,
                "text_bytes": url["bytes"],
                "classifiers": {"topic": url["topic"], "format": url["format"],
                                "topic_nourl": nourl["topic"], "format_nourl": nourl["format"]},
                "pairs": {pair_key(("topic", "format")): url["pair"],
                          pair_key(("topic_nourl", "format_nourl")): nourl["pair"]},
            }  # fmt: skip
            counts[rel] = LabelCounts.from_json(lc, rel)
            path = output / f"{rel}.stats.json"
            stats = json.loads(path.read_text())
            stats["label_counts"] = lc
            path.write_bytes(filestats.stats_bytes(stats))
            file_stats[rel] = {k: stats.get(k) for k in filestats.FIGURES}
        tasks = [(plan["file"][i], [plan["file"][i]]) for i in by_shard.get(shard, [])]
        write_atomic(summaries.summary_path(run_dir, shard), summaries.build(shard, tasks, counts))
        marker = run_dir / "shards" / f"{shard}.done"  # as the job writes it: with file_stats
        body = json.loads(marker.read_text())
        marker.write_text(json.dumps({**body, "file_stats": file_stats}))
    (root / "BUILT").write_text(f"{n_files} {n_shards}\n")
    return {"nonzero_pair_cells_per_file": float(np.mean(nonzero)) if nonzero else 0.0}


def fresh_cli(*args: str) -> tuple[float, float]:
    """(wall, CPU) seconds for ``shardwise ARGS`` in a new interpreter (output discarded).

    CPU time (user + system of the child) is printed too: on a shared machine the wall
    time mostly measures the neighbours.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "shardwise.cli", *args], check=True, stdout=subprocess.DEVNULL
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--files", type=int, default=56_514, help="source files in the run")
    parser.add_argument("--shards", type=int, default=3_000, help="logical shards")
    parser.add_argument("--dir", type=Path, default=OUT, help="where the run is built")
    args = parser.parse_args()
    out = args.dir.absolute()
    built = out / "BUILT"
    if args.rebuild or not built.exists() or built.read_text() != f"{args.files} {args.shards}\n":
        t0 = time.perf_counter()
        info = build(out, args.files, args.shards)
        print(f"built synthetic run in {time.perf_counter() - t0:.1f} s: {out} "
              f"({info['nonzero_pair_cells_per_file']:.0f} non-zero topic x format cells "
              "per file)")  # fmt: skip
    run_dir = str(out / "run")
    size = sum(p.stat().st_size for p in (out / "run" / "summaries").glob("*.arrow"))
    stats = list((out / "output").rglob("*.stats.json"))
    stats_size = sum(p.stat().st_size for p in stats)
    from shardwise.ops.domains import compute as domains
    from shardwise.ops.domains import render as domains_format

    t0 = time.perf_counter()
    d = domains.compute(domains.load(Path(run_dir)))
    in_process = time.perf_counter() - t0
    print(domains_format.format_table(d, top=10))
    print()
    figures = {
        "shardwise domains (topic x format)": min(
            fresh_cli("domains", "--run-dir", run_dir) for _ in range(3)
        ),
        "shardwise domains --classifier topic": fresh_cli(
            "domains", "--run-dir", run_dir, "--classifier", "topic"
        ),
        "shardwise domains --format json": fresh_cli(
            "domains", "--run-dir", run_dir, "--format", "json"
        ),
        "shardwise domains --by category": fresh_cli(
            "domains", "--run-dir", run_dir, "--by", "category", "--classifier", "topic"
        ),
        "shardwise coverage (stats with label counts)": min(
            fresh_cli("coverage", "--run-dir", run_dir, "--gpus", "8") for _ in range(2)
        ),
        "shardwise --version (start-up only)": fresh_cli("--version"),
    }
    n_summaries = len(list((out / "run" / "summaries").glob("*.arrow")))
    print(
        f"{args.files:,} files / {args.shards:,} shards, half done: {n_summaries:,} summaries "
        f"({size / 1e6:.1f} MB), {len(stats):,} stats files ({stats_size / 1e6:.1f} MB)"
    )
    print(f"  in-process load + compute (topic x format)  {in_process:.3f} s")
    for name, (wall, cpu) in figures.items():
        print(f"  fresh CLI: {name:<46} {wall:.3f} s wall, {cpu:.3f} s CPU")
    return 0 if figures["shardwise domains (topic x format)"][0] < BUDGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
