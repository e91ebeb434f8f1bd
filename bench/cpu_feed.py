"""The CPU side of a shard job, per core: can it keep a GPU fed on the Dolma-like mix?

At the GPU path's goal, 1.5M tokens/s per classifier, a job labels about 930 documents/s
(mean ~1,600 tokens; docs/engine.md). Its CPU must read that many, tokenize them for every
classifier (the streams shared where tokenizer, input and length agree) and write their
outputs. This measures, on this machine:

- documents/s of each CPU stage on one core (``RAYON_NUM_THREADS`` and torch's threads at
  ``--threads``): reading (JSON Lines, gzip), tokenizing (``Engine.prepare``: the four
  WebOrganizer-shaped classifiers, WordPiece with a 30,000 vocabulary, cut at 8,192
  tokens), writing (the sidecar, stats and marker: ``outputs.write_all``);
- the real shard job (``run_shard``) with a GPU stand-in that labels nothing and takes as
  long as the CPU stages of each file: sequential would take the CPU's time plus the
  GPU's; the job, whose reader thread reads and tokenizes file N+1 while file N is on the
  GPU, takes its wall time. Their ratio is the overlap's gain (2x at best);
- the cores a job needs for the goal: 930 documents/s over the documents/s per core of
  read + tokenize (the reader thread's share) and of write (the main thread's).

    python bench/cpu_feed.py [--docs 1200] [--files 12] [--threads 1] [--goal 930]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

#: Documents/s per GPU job at 1.5M tokens/s per classifier, mean ~1,600 tokens.
GOAL_DOCS_PER_S = 930
#: A Dolma-like length in words (~1.3 tokens each): median ~900, a tail cut at 6,000.
MEDIAN_WORDS, SIGMA, MAX_WORDS = 900.0, 0.9, 6000


def write_corpus(root: Path, docs: int, files: int) -> list[str]:
    """``files`` JSON Lines (gzip) files of the Dolma-like mix; their paths under ``root``."""
    from synthetic import labelled_corpus

    corpus = labelled_corpus(docs, seed=3, median_words=MEDIAN_WORDS, sigma=SIGMA,
                             max_words=MAX_WORDS)  # fmt: skip
    rels = []
    for f in range(files):
        rel = f"cc/mix/part-{f:04d}.jsonl.gz"
        rows = range(f, docs, files)
        lines = "".join(
            json.dumps({"id": f"d{i}", "text": corpus.texts[i], "url": corpus.urls[i]}) + "\n"
            for i in rows
        )
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(gzip.compress(lines.encode(), compresslevel=6))
        rels.append(rel)
    return rels


class GpuStandIn:
    """The engine as a job sees it, with the real ``prepare`` and a ``run`` that labels
    nothing: it takes ``seconds(docs)`` (the GPU's time) and returns constant labels."""

    device, device_name, dtype_name = "cpu", "gpu stand-in", "bfloat16"

    def __init__(self, engine, names: list[str], seconds) -> None:
        self.engine, self.names, self.seconds = engine, names, seconds
        self.gpu_s = 0.0

    def prepare(self, texts, urls):
        return self.engine.prepare(texts, urls)

    def run(self, prepared):
        import pyarrow as pa

        wait = self.seconds(prepared.docs)
        time.sleep(wait)
        self.gpu_s += wait
        n = prepared.docs
        columns = {}
        for name in self.names:
            columns[f"{name}_label"] = pa.array(["a"] * n, pa.string())
            columns[f"{name}_label_id"] = pa.array([0] * n, pa.int32())
            columns[f"{name}_score"] = pa.array([0.5] * n, pa.float32())
        return SimpleNamespace(columns=columns, stats={"tokens": 0, "fidelity": None})


def stage_seconds(ctx, engine, rels: list[str], scratch: Path) -> dict[str, float]:
    """Each CPU stage's seconds over ``rels``, one stage after the other (read, tokenize,
    write: to ``scratch``, not the run's output), in this thread; and the documents."""
    from shardwise.run import outputs
    from shardwise.run.filestats import FileStats
    from shardwise.run.reader import read_documents
    from shardwise.store.location import Location

    roots = {"output": Location(str(scratch))}

    out = {"read": 0.0, "tokenize": 0.0, "write": 0.0, "docs": 0}
    stand_in = GpuStandIn(engine, [n for n, _, _ in ctx.meta.classifiers], lambda _n: 0.0)
    for rel in rels:
        t0 = time.perf_counter()
        docs = read_documents(ctx.source, rel, ctx.fields, ctx.fmt)
        t1 = time.perf_counter()
        prepared = engine.prepare(docs.texts, docs.urls)
        t2 = time.perf_counter()
        labels = stand_in.run(prepared)
        stats = FileStats(file=rel, task_id=rel, shard=0, docs=len(docs))
        labelled = outputs.Labelled(rel=rel, task_id=rel, shard=0, identity=None, ids=docs.ids,
                                    columns=labels.columns, stats=stats)  # fmt: skip
        outputs.write_all(roots, labelled)
        t3 = time.perf_counter()
        out["read"] += t1 - t0
        out["tokenize"] += t2 - t1
        out["write"] += t3 - t2
        out["docs"] += len(docs)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1200, help="documents in the corpus")
    parser.add_argument("--files", type=int, default=12, help="files they are spread over")
    parser.add_argument("--threads", type=int, default=1, help="cores the CPU stages use")
    parser.add_argument("--goal", type=float, default=GOAL_DOCS_PER_S, help="documents/s")
    args = parser.parse_args()
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)  # before tokenizers is imported
    import logging

    import torch
    from synthetic import trained_models

    from shardwise.classify.engine import Engine
    from shardwise.classify.shard_job import run_shard
    from shardwise.config import InferenceSettings
    from shardwise.demo.corpus import demo_config
    from shardwise.planner.prepare import prepare_run
    from shardwise.run.opened import open_run

    torch.set_num_threads(args.threads)
    logging.disable(logging.WARNING)
    specs = trained_models(hidden_size=32, layers=1, heads=2, vocab_size=30000, steps=1)
    with tempfile.TemporaryDirectory(prefix="shardwise-cpu-feed-") as tmp:
        root = Path(tmp)
        rels = write_corpus(root / "corpus", args.docs, args.files)
        cfg = demo_config(root, total_shards=1)
        cfg["input"] = {"uri": str(root / "corpus")}
        cfg["classifiers"] = [{"name": s.name, "model": s.model, "input": s.input} for s in specs]
        cfg["inference"].update({"device": "cpu", "max_length": 8192})
        prepare_run(cfg, main_process=True, dryrun=True)
        run_dir = Path(cfg["run_dir"])
        ctx = open_run(run_dir)
        engine = Engine.load(specs, InferenceSettings(device="cpu", max_length=8192))
        engine.prepare(["warm up"], ["https://example.org"])
        stages = stage_seconds(ctx, engine, rels, root / "scratch")
        docs = stages["docs"]
        per_file_cpu = (stages["read"] + stages["tokenize"] + stages["write"]) / docs
        stand_in = GpuStandIn(engine, [s.name for s in specs], lambda n: n * per_file_cpu)
        started = time.perf_counter()
        report = run_shard(run_dir, 0, engine_factory=lambda _ctx: stand_in, progress=False)
        wall = time.perf_counter() - started
    assert report.labelled == len(rels), report
    cpu = stages["read"] + stages["tokenize"] + stages["write"]
    sequential = cpu + stand_in.gpu_s
    rate = {k: docs / stages[k] for k in ("read", "tokenize", "write")}
    reader = docs / (stages["read"] + stages["tokenize"])
    where = "per core" if args.threads == 1 else f"at {args.threads} threads"
    head = f"cpu feed: {docs:,} documents in {len(rels)} files, Dolma-like (median "
    print(head + f"{MEDIAN_WORDS:.0f} words), {args.threads} thread(s), torch {torch.__version__}")
    print(
        f"documents/s {where}: " + ", ".join(f"{k} {v:,.0f}" for k, v in rate.items())
        + f"; read + tokenize {reader:,.0f}; all three {docs / cpu:,.0f}"
    )  # fmt: skip
    text = f"shard job with a GPU stand-in as slow as the CPU: sequential {sequential:.2f} s, "
    print(text + f"overlapped {wall:.2f} s: {sequential / wall:.2f}x (2x at best)")
    if args.threads == 1:
        text = f"cores for {args.goal:,.0f} documents/s: {args.goal / reader:.1f} for the reader "
        print(text + f"thread's read + tokenize, {args.goal / rate['write']:.2f} for the writes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
