"""Start-up per shard job, and its share of a production shard's time.

Every shard job is a fresh process that imports torch and transformers, loads each
classifier (twice in half precision: the fp32 re-check's copy), on CUDA finds its batch
budget, and (packed) runs the self-check before its first batch, compiling the packed
forward first where ``inference.compile`` says so. None of it labels a document. This
runs what a job runs, each time in a fresh interpreter, twice on the same run directory:
the first job probes the budget and compiles with no compile cache at all (cold: no
``TORCHINDUCTOR_CACHE_DIR`` but an operator's, a cache of its own), the second, in
another cache of its own, reads the first's record and unpacks the compiled kernels it
kept in the run directory (warm: ``run/budgets.py``, ``classify/compiling.py``).
The share is start-up over a production shard's time: about 360 s at the seed's pace of
10 shards an hour per GPU (``--shard-seconds``).

    python bench/startup.py                          # the demo's four tiny classifiers
    python bench/startup.py --real-shape             # four GTE-base-shaped ones (random)
    python bench/startup.py --models DIR             # DIR/{topic,topic_nourl,format,...}
    python bench/startup.py --attention packed --compile on   # compiled: cold, then warm
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shardwise.classify import compiling

#: A production shard at the seed's pace: about 10 shards an hour per GPU (issue 49).
SHARD_SECONDS = 360.0
NAMES = ("topic", "topic_nourl", "format", "format_nourl")


def child(models: Path, device: str, forward: tuple[str, str], run_dir: Path) -> dict:
    """One job's start-up, in this (fresh) interpreter: seconds per stage."""
    started = time.perf_counter()
    import numpy as np  # timed: the imports a job pays
    import torch

    from shardwise.classify.engine import ClassifierSpec, Engine, Prepared
    from shardwise.classify.tokenization import TokenStream
    from shardwise.config import InferenceSettings

    imported = time.perf_counter()
    specs = [
        ClassifierSpec(n, str(models / n), "text" if n.endswith("nourl") else "url_text")
        for n in NAMES
    ]
    attention, compile_ = forward
    settings = InferenceSettings(
        device=device, attention=attention, compile=compile_, max_length=8192
    )
    engine = Engine.load(specs, settings, budget_dir=run_dir / "budgets")
    loaded = time.perf_counter()
    one = TokenStream(
        ids=np.array([2, 7, 3], np.int32),
        offsets=np.array([0, 3]),
        lengths=np.array([3], np.int32),
        pad_id=0,
    )
    keys = {c.key for c in engine._classifiers}
    engine.infer(Prepared(docs=1, streams=dict.fromkeys(keys, one), tokenize_s=0.0))
    if engine.device.type == "cuda":
        torch.cuda.synchronize(engine.device)
    ready = time.perf_counter()
    return {
        "imports_s": imported - started,
        "load_s": loaded - imported,
        "probe_s": engine.probe_s,
        "first_batch_s": ready - loaded - engine.probe_s,
        "budget_cached": engine.budget_cached,
        "models_loaded": len({c.spec.model for c in engine._classifiers}) + len(engine._fp32),
        "device": str(engine.device_name),
        "dtype": engine.dtype_name,
        "attention": engine.attention.mode,
        "compiled": engine.compile.on,
        "compile_s": engine.compile_s,
        "compile_source": engine.compile_cache.source if engine.compile_cache else None,
        "compile_kernels": list(engine.compile_kernels),  # Inductor's hits, misses
    }


def one_job(models: Path, device: str, forward: tuple[str, str], run_dir: Path) -> dict:
    """A fresh interpreter's start-up figures, and its whole wall time (Python's own too)."""
    args = [sys.executable, __file__, "--child", "--models", str(models), "--device", device]
    args += ["--attention", forward[0], "--compile", forward[1], "--run-dir", str(run_dir)]
    env = dict(os.environ)
    if compiling.operator_cache() is None:  # never the cache an earlier job left here
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    started = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"the job's start-up failed:\n{proc.stderr[-3000:]}")
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    return figures | {"wall_s": wall}


def build_models(root: Path, real_shape: bool) -> Path:
    """The four classifiers, built offline (random weights: start-up does not care)."""
    from synthetic import labelled_corpus

    from shardwise.demo.tinymodels import (
        build_tiny_gte_classifier,
        build_wordpiece_tokenizer,
        weborganizer_labels,
    )

    corpus = labelled_corpus(300, seed=0, median_words=80)
    tokenizer = root / ".tokenizer"
    vocab = 30522 if real_shape else 4000
    build_wordpiece_tokenizer(corpus.texts + corpus.urls, tokenizer, vocab_size=vocab)
    shape = {"hidden_size": 768, "num_layers": 12, "num_heads": 12} if real_shape else {}
    labels = weborganizer_labels()
    for seed, name in enumerate(NAMES):
        build_tiny_gte_classifier(
            root / name,
            labels[name.removesuffix("_nourl")],
            tokenizer,
            seed=seed,
            new_format=True,
            initializer_range=0.02,
            **shape,
        )
    return root


def report(jobs: list[dict], shard_seconds: float) -> dict:
    """Per job: the stages, the start-up and its share of a production shard."""
    rows = []
    for index, job in enumerate(jobs, 1):
        startup = job["wall_s"]
        rows.append(job | {"job": index, "startup_s": startup, "share": startup / shard_seconds})
    return {"shard_seconds": shard_seconds, "jobs": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, help="a directory with the four classifiers")
    parser.add_argument("--real-shape", action="store_true", help="GTE-base-shaped models")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--attention", default="auto", choices=("auto", "padded", "packed"))
    parser.add_argument("--compile", default="auto", choices=("auto", "on", "off"))
    parser.add_argument("--jobs", type=int, default=2, help="jobs run one after another")
    parser.add_argument("--shard-seconds", type=float, default=SHARD_SECONDS)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    forward = (args.attention, args.compile)
    if args.child:
        print(json.dumps(child(args.models, args.device, forward, args.run_dir)))
        return 0
    with tempfile.TemporaryDirectory(prefix="shardwise-startup-") as tmp:
        models = args.models or build_models(Path(tmp) / "models", args.real_shape)
        run_dir = Path(tmp) / "run"
        jobs = [one_job(models, args.device, forward, run_dir) for _ in range(args.jobs)]
    result = report(jobs, args.shard_seconds)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    first = jobs[0]
    compiled = ", compiled" if first["compiled"] else ""
    what = f"{first['dtype']}, {first['attention']}{compiled}"
    print(f"start-up per shard job on {first['device']} ({what})")
    print(f"{'job':>3} {'imports':>8} {'loads':>8} {'probe':>7} {'1st batch':>9} {'wall':>7} share")
    for row in result["jobs"]:
        cached = " (budget read)" if row["budget_cached"] else ""
        print(
            f"{row['job']:>3} {row['imports_s']:7.2f}s {row['load_s']:7.2f}s "
            f"{row['probe_s']:6.2f}s {row['first_batch_s']:8.2f}s {row['wall_s']:6.2f}s "
            f"{100 * row['share']:.2f}% of a {args.shard_seconds:.0f} s shard{cached}"
        )
    print(f"models loaded per job: {first['models_loaded']}")
    if first["compiled"] and len(jobs) > 1:
        cold, warm = first["compile_s"], jobs[-1]["compile_s"]
        print(
            f"compiled forward's first call (self-check): cold {cold:.2f} s (job 1), "
            f"warm {warm:.2f} s (job {len(jobs)}, the run directory's kernels): "
            f"{cold / max(warm, 1e-9):.1f}x"
        )
        for row in result["jobs"]:
            hits, misses = row["compile_kernels"]
            print(
                f"job {row['job']}'s kernels: {row['compile_source']} "
                f"(Inductor's cache: {hits} hit(s), {misses} graph(s) compiled)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
