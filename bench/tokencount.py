"""The cost of counting tokens in the training tokenizer (``domains.tokenizer``) on a shard job.

Builds the demo (its corpus, the four tiny classifiers and its stand-in training
tokenizer), then labels the same corpus twice with the real shard job in this process,
on the CPU: once without ``domains.tokenizer`` and once with it (the counting runs on
the job's reader thread, beside the classifiers' tokenization). Prints documents/s of
each, measured after a warm-up shard, and their ratio: the figure to read (the same
machine, the same corpus, the same models).

    python bench/tokencount.py [--files 5] [--docs 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from shardwise.classify.shard_job import run_shard
from shardwise.demo.corpus import CATEGORIES, DemoSize, _records, demo_config, write_corpus
from shardwise.demo.tinymodels import build_weborganizer_demo_models, build_wordpiece_tokenizer
from shardwise.planner.prepare import prepare_run
from shardwise.run import plan


def label(root: Path, models: Path, tokenizer: Path | None, size: DemoSize) -> tuple[int, float]:
    """Plan and label one copy of the corpus; (documents, seconds spent labelling)."""
    write_corpus(root / "corpus", size)
    cfg = demo_config(root, total_shards=1, tokenizer=tokenizer)
    for c in cfg["classifiers"]:
        c["model"] = str(models / c["name"])
    cfg["inference"].update({"device": "cpu", "max_length": 512})
    prepare_run(cfg, main_process=True, dryrun=True)
    run_dir = Path(cfg["run_dir"])
    t0 = time.perf_counter()
    for shard in sorted(plan.nonempty_shards(plan.load(run_dir))):
        run_shard(run_dir, shard, progress=False)
    docs = size.files_per_category * size.docs_per_file * len(CATEGORIES)
    return docs, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5, help="files per category")
    parser.add_argument("--docs", type=int, default=200, help="documents per file")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, best kept")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    size = DemoSize(files_per_category=args.files, docs_per_file=args.docs)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sample = [r["text"] for s, c, _ in CATEGORIES for r in _records(s, c, 0, DemoSize(), 0)]
        models = build_weborganizer_demo_models(root / "models", sample)
        models_dir = next(iter(models.values())).parent
        tokenizer = root / "tokenizer"
        build_wordpiece_tokenizer(sample, tokenizer, vocab_size=2000)
        label(root / "warm", models_dir, None, DemoSize(files_per_category=1, docs_per_file=20))
        best: dict[str, float] = {}
        docs = 0
        for i in range(args.repeats):
            for name, tok in (("without", None), ("with", tokenizer)):
                docs, seconds = label(root / f"{name}-{i}", models_dir, tok, size)
                best[name] = min(best.get(name, float("inf")), seconds)
    print(f"{docs:,} documents, the demo's four tiny classifiers, CPU; best of {args.repeats}")
    for name in ("without", "with"):
        print(f"{name + ' domains.tokenizer':<26} {docs / best[name]:>10,.1f} docs/s")
    print(f"with / without: {best['without'] / best['with']:.3f}x the rate")


if __name__ == "__main__":
    main()
