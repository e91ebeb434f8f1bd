"""Dry-run cost at production scale: 56,514 files into 3,000 logical shards.

Builds a synthetic Dolma-style tree (empty files: planning reads names and sizes
only), then times ``snakemake --dry-run`` under ``/usr/bin/time -v`` three ways:
the first run (lists, hashes, pins run.json, builds the plan), a second run (lists
again to detect input changes, reuses the cached plan), and a run with
``input.relist=false`` (trusts the cached plan). Prints wall time and peak RSS of
each and the ratios against the first run.

    python bench/dryrun.py [--files 56514] [--shards 3000] [--dir bench/out/dryrun]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("cc", "c4", "books", "wiki", "reddit", "stack", "pes2o", "starcoder")
CATEGORIES = tuple(f"cat{i:02d}" for i in range(12))


def build_corpus(root: Path, n: int) -> None:
    """n empty .jsonl.gz files as <source>/<category>/part-NNNNN.jsonl.gz."""
    if root.exists() and sum(1 for _ in root.rglob("*.jsonl.gz")) == n:
        return
    shutil.rmtree(root, ignore_errors=True)
    for i in range(n):
        d = root / SOURCES[i % len(SOURCES)] / CATEGORIES[(i // 7) % len(CATEGORIES)]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"part-{i:05d}.jsonl.gz").touch()


def timed(cmd: list[str]) -> tuple[float, int, str]:
    """Wall seconds and max RSS (KB) of cmd under /usr/bin/time -v."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    elapsed = re.search(r"Elapsed \(wall clock\) time.*: (.+)", proc.stderr).group(1)
    return wall, rss, elapsed


def main() -> None:
    """Build, run three dry runs, print figures and ratios."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, default=56_514)
    ap.add_argument("--shards", type=int, default=3_000)
    ap.add_argument("--dir", type=Path, default=REPO / "bench" / "out" / "dryrun")
    args = ap.parse_args()
    base = args.dir.absolute()
    t0 = time.perf_counter()
    build_corpus(base / "corpus", args.files)
    print(f"corpus: {args.files} files ({time.perf_counter() - t0:.1f} s to build)")
    shutil.rmtree(base / "run", ignore_errors=True)
    shutil.rmtree(base / "labels", ignore_errors=True)
    cfg = {
        "run_dir": str(base / "run"),
        "input": {"uri": str(base / "corpus")},
        "output": {"uri": str(base / "labels")},
        "sharding": {"total_shards": args.shards},
        "classifiers": [{"name": "topic", "model": "unused", "input": "url_text"}],
        "resources": {"classify": {"runtime": 60}},
    }
    config = base / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    cfg["input"]["relist"] = False
    trusting = base / "config-norelist.yaml"
    trusting.write_text(yaml.safe_dump(cfg))

    def cmd(configfile: Path) -> list[str]:
        return [
            sys.executable, "-m", "snakemake", "--dry-run", "--quiet", "rules",
            "--snakefile", str(REPO / "Snakefile"), "--directory", str(base),
            "--configfile", str(configfile),
        ]  # fmt: skip

    rows = [
        ("first (list + plan + pin)", timed(cmd(config))),
        ("second (relist, cached plan)", timed(cmd(config))),
        ("cached plan, relist=false", timed(cmd(trusting))),
    ]
    first = rows[0][1][0]
    print(f"{'dry run':32s} {'wall s':>8s} {'max RSS MB':>11s} {'vs first':>9s}")
    for name, (wall, rss, _) in rows:
        print(f"{name:32s} {wall:8.2f} {rss / 1024:11.0f} {wall / first:9.2f}")


if __name__ == "__main__":
    main()
