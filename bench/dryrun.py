"""Dry-run cost by corpus size and shard count, beside a bare Snakefile with as many targets.

For each (files, shards) cell: builds a synthetic Dolma-style tree of empty files
(planning reads names and sizes only) and times ``snakemake --dry-run`` under
``/usr/bin/time -v`` three ways: the first run (lists, hashes, pins run.json, builds the
plan), a second run (lists again to detect input changes, reuses the cached plan) and a
run with ``input.relist: false`` (trusts the cached plan). Beside them, a bare Snakefile
that declares the same number of targets and nothing else: what Snakemake itself costs,
so shardwise's own share is the difference. The model check passes on one tiny
classifier built offline (the demo's, cached under ``--dir``). Prints wall seconds and
peak RSS per cell, one run each, and the ratios docs/configuration.md quotes.

    python bench/dryrun.py                                 # 56,514 files, 3,000 shards
    python bench/dryrun.py --files 56514,565140 --shards 3000,30000
"""

from __future__ import annotations

import argparse
import itertools
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from shardwise.demo.corpus import CATEGORIES, DemoSize, _records

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("cc", "c4", "books", "wiki", "reddit", "stack", "pes2o", "starcoder")
TOPICS = tuple(f"cat{i:02d}" for i in range(12))

#: A Snakefile with N targets and one rule, nothing else: Snakemake's own share.
BARE_SNAKEFILE = """\
N = int(config["targets"])


rule all:
    input:
        expand("out/{i}.done", i=range(N)),


rule one:
    output:
        "out/{i}.done",
    shell:
        "touch {output}"
"""


def build_corpus(root: Path, n: int) -> None:
    """n empty .jsonl.gz files as <source>/<category>/part-NNNNNN.jsonl.gz (kept if built)."""
    marker = root / f".built-{n}"
    if marker.exists():
        return
    shutil.rmtree(root, ignore_errors=True)
    for i in range(n):
        d = root / SOURCES[i % len(SOURCES)] / TOPICS[(i // 7) % len(TOPICS)]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"part-{i:06d}.jsonl.gz").touch()
    marker.touch()


def build_model(root: Path) -> Path:
    """One tiny classifier that passes the model check (built offline, once)."""
    model = root / "topic"
    if not (model / "config.json").exists():
        # torch and transformers load here: building a model is all this script needs of them
        from shardwise.demo.tinymodels import build_weborganizer_demo_models

        size = DemoSize(files_per_category=1, docs_per_file=8)
        sample = [r["text"] for s, c, _ in CATEGORIES for r in _records(s, c, 0, size, 0)]
        build_weborganizer_demo_models(root, sample)
    return model


def timed(cmd: list[str], cwd: Path | None = None) -> tuple[float, int]:
    """Wall seconds and max RSS (kB) of ``cmd`` under /usr/bin/time -v."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, check=False, cwd=cwd
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    return wall, rss


def dry_run(snakefile: Path, directory: Path, *config: str) -> list[str]:
    """``snakemake --dry-run`` of ``snakefile`` in ``directory`` (rule summary only)."""
    return [
        sys.executable, "-m", "snakemake", "--dry-run", "--quiet", "rules",
        "--snakefile", str(snakefile), "--directory", str(directory), *config,
    ]  # fmt: skip


def cell(base: Path, files: int, shards: int, model: Path) -> dict[str, tuple[float, int]]:
    """The four timings of one (files, shards) cell."""
    corpus = base / f"corpus-{files}"
    build_corpus(corpus, files)
    work = base / f"run-{files}-{shards}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cfg = {
        "run_dir": str(work / "run"),
        "input": {"uri": str(corpus)},
        "output": {"uri": str(work / "labels")},
        "sharding": {"total_shards": shards},
        "classifiers": [{"name": "topic", "model": str(model), "input": "url_text"}],
        "resources": {"classify": {"runtime": 60}},
    }
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    cfg["input"]["relist"] = False
    trusting = work / "config-norelist.yaml"
    trusting.write_text(yaml.safe_dump(cfg))
    snakefile = REPO / "Snakefile"
    bare = base / "bare" / "Snakefile"
    bare.parent.mkdir(parents=True, exist_ok=True)
    bare.write_text(BARE_SNAKEFILE)
    bare_dir = base / f"bare-{shards}"
    shutil.rmtree(bare_dir, ignore_errors=True)
    bare_dir.mkdir()
    return {
        "first": timed(dry_run(snakefile, work, "--configfile", str(config))),
        "relist": timed(dry_run(snakefile, work, "--configfile", str(config))),
        "norelist": timed(dry_run(snakefile, work, "--configfile", str(trusting))),
        "bare": timed(dry_run(bare, bare_dir, "--config", f"targets={shards}")),
    }


def counts(text: str) -> list[int]:
    """``56514,565140`` -> [56514, 565140]."""
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def main() -> None:
    """Every cell, then the table and the scaling ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=counts, default=[56_514], help="comma-separated file counts")
    ap.add_argument("--shards", type=counts, default=[3_000], help="comma-separated shard counts")
    ap.add_argument("--dir", type=Path, default=REPO / "bench" / "out" / "dryrun")
    args = ap.parse_args()
    base = args.dir.absolute()
    model = build_model(base / "models")
    results = {}
    for files in args.files:
        for shards in args.shards:
            results[(files, shards)] = cell(base, files, shards, model)
    head = "files / shards          first (list + plan + pin)   relist, cached plan"
    print(f"{head}   relist: false   bare Snakefile, same targets")
    for (files, shards), r in results.items():
        first, relist, norelist, bare = r["first"], r["relist"], r["norelist"], r["bare"]
        print(
            f"{files:>9,} / {shards:<9,}  {first[0]:7.2f} s / {first[1] / 1024:6.0f} MB"
            f"           {relist[0]:7.2f} s         {norelist[0]:7.2f} s"
            f"        {bare[0]:7.2f} s / {bare[1] / 1024:5.0f} MB"
        )
    keys = list(results)
    for (fa, sa), (fb, sb) in itertools.pairwise(keys):
        ratio = results[(fb, sb)]["first"][0] / results[(fa, sa)]["first"][0]
        print(f"first dry run, {fb:,} / {sb:,} vs {fa:,} / {sa:,}: {ratio:.2f}x")
    for (files, shards), r in results.items():
        own = r["first"][0] - r["bare"][0]
        print(
            f"shardwise's own share at {files:,} / {shards:,}: {own:.2f} s of {r['first'][0]:.2f} s"
        )


if __name__ == "__main__":
    main()
