"""Time ``shardwise select``'s pass 2 (per file, from its sidecar) and its peak memory.

Builds synthetic sidecars (``id``, ``topic_label``, ``format_label``, ``tokens``; 24 x 24
domains, files of ``--rows-per-file`` rows) and selects every file with the real
per-file code (``ops/select_files.select_file`` and the selection Parquet it writes),
once per total size in a fresh process, so that each size's peak RSS is its own.
Prints rows/s and peak RSS per size, each against the smallest: pass 2 holds one
sidecar at a time, so the rate should stay flat and the peak should not grow with the
corpus.

    python bench/selection.py [--sizes 2e6,20e6] [--rows-per-file 100000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

from shardwise.ops.select.files import select_file
from shardwise.run import selection, sidecar
from shardwise.run.selection import Domain, SelectionPlan
from shardwise.store.location import Location

TOPICS = tuple(f"Topic {i}" for i in range(24))
FORMATS = tuple(f"Format {i}" for i in range(24))


def _plan() -> SelectionPlan:
    rng = np.random.default_rng(1)
    domains = tuple(
        Domain(labels=(t, f), weight=1 / 576, available_tokens=1, available_docs=1,
               target_tokens=1.0, rate=float(rng.uniform(0, 3)), capped=False)
        for t in TOPICS for f in FORMATS
    )  # fmt: skip
    return SelectionPlan(
        name="bench", axes=("topic", "format"), budget_tokens=1, max_repeat=3, seed=0,
        redistribute=False, partial=False, labelled_tasks=1, population_tasks=1, shards=(0,),
        domains=domains, weights_from="bench", created_at="",
    )  # fmt: skip


def _sidecar(rows: int, start: int) -> bytes:
    rng = np.random.default_rng(start)
    t, f = rng.integers(0, 24, rows), rng.integers(0, 24, rows)
    table = pa.table({
        "id": [f"doc-{start + i:010d}" for i in range(rows)],
        "topic_label": pa.array(TOPICS).take(pa.array(t)),
        "format_label": pa.array(FORMATS).take(pa.array(f)),
        sidecar.TOKENS: pa.array(rng.integers(50, 3000, rows), pa.int64()),
    })  # fmt: skip
    return sidecar.to_parquet_bytes(table)


def one(total: int, per_file: int) -> dict[str, float]:
    """Select ``total`` rows in files of ``per_file``; the time and peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Location(tmp)
        files = []
        for i, start in enumerate(range(0, total, per_file)):
            rel = f"cc/part-{i:05d}.jsonl"
            out.write_bytes(rel + sidecar.SUFFIX, _sidecar(min(per_file, total - start), start))
            files.append(rel)
        sel = _plan()
        index = {d.labels: i for i, d in enumerate(sel.domains)}
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        copies = 0
        for rel in files:
            got = select_file(out, sel, index, rel)
            data = selection.file_bytes(selection.file_table(got.ids, got.repeats))
            out.write_bytes(rel + ".selection.parquet", data)
            copies += int(got.repeats.sum())
        seconds = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"rows": total, "seconds": seconds, "peak_mb": peak / 1024,
            "growth_mb": (peak - base) / 1024, "copies": copies}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2e6,20e6")
    parser.add_argument("--rows-per-file", type=int, default=100_000)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.rows_per_file)))
        return
    results = []
    for size in (int(float(s)) for s in args.sizes.split(",")):
        cmd = [sys.executable, __file__, "--one", str(size), "--rows-per-file",
               str(args.rows_per_file)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results.append(json.loads(proc.stdout.splitlines()[-1]))
    first = results[0]
    print(f"{'rows':>12}  {'seconds':>8}  {'rows/s':>10}  {'x rate':>7}  {'peak RSS':>9}  "
          f"{'x peak':>7}  {'copies':>10}")  # fmt: skip
    for r in results:
        rate = r["rows"] / r["seconds"]
        print(f"{r['rows']:>12,}  {r['seconds']:>8.2f}  {rate:>10,.0f}  "
              f"{rate / (first['rows'] / first['seconds']):>7.2f}  {r['peak_mb']:>7.0f}MB  "
              f"{r['peak_mb'] / first['peak_mb']:>7.2f}  {r['copies']:>10,}")  # fmt: skip


if __name__ == "__main__":
    main()
