"""Time and peak memory of one long document, read and labelled, against a 5 kB one.

A PDF-derived source can hold a single text of megabytes. Labelling looks at the first
``max_length`` tokens, so reading it is all that may grow with its size: the text is cut
(after whitespace, well past the truncation length) before it is tokenized. For each
size, in a fresh interpreter (a clean peak RSS), one JSON Lines file of one document is
read by the job's reader and labelled by the engine with two demo-like classifiers (URL
and no URL, one shared tokenizer) on the CPU. Printed per size: read, tokenize and model
seconds, the peak RSS above the interpreter's before the read, and the ratios to the 5 kB
document in this same run; beside them, what the tokenizer's own encoding of the whole
text costs (what the job paid before the cut reached the verification sample). Then the
token count of ``domains.tokenizer`` (the job's ``TokenCounter``, pieces encoded a batch
at a time): its seconds, the peak with labelling and counting together, and whether the
count equals the tokenizer's own count of the whole text (encoded last: it holds every
token's encoding, the cost the batches avoid).

    python bench/long_docs.py [--sizes 5e3,5e6,5e7] [--max-length 128]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("page", "figure", "table", "results", "the", "of", "and", "model", "data", "in")


def peak_mb() -> float:
    """This process's peak resident set (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(models: Path, size: int, max_length: int, whole: bool) -> dict[str, float]:
    """One size, in this (fresh) process: read, tokenize, run; seconds and peak MB."""
    from shardwise.classify.engine import ClassifierSpec, Engine
    from shardwise.classify.tokencount import TokenCounter
    from shardwise.config import InferenceSettings
    from shardwise.run.fields import FieldPaths
    from shardwise.run.reader import read_documents
    from shardwise.store.location import Location

    specs = [ClassifierSpec("topic", str(models / "topic"), "url_text"),
             ClassifierSpec("topic_nourl", str(models / "topic_nourl"), "text")]  # fmt: skip
    engine = Engine.load(specs, InferenceSettings(max_length=max_length, device="cpu"))
    rng = random.Random(size)
    folder = Path(tempfile.mkdtemp())
    with (folder / "doc.jsonl").open("w") as fh:
        text = " ".join(rng.choice(WORDS) for _ in range(size // 5 + 1))[:size]
        fh.write(json.dumps({"id": "d0", "text": text, "url": "https://example.org/x.pdf"}))
        del text
    engine.run(engine.prepare(["warm up"], ["https://example.org"]))
    before = peak_mb()
    t0 = time.perf_counter()
    docs = read_documents(Location(str(folder)), "doc.jsonl", FieldPaths())
    t1 = time.perf_counter()
    prepared = engine.prepare(docs.texts, docs.urls)
    t2 = time.perf_counter()
    engine.run(prepared)
    t3 = time.perf_counter()
    out = {"read_s": t1 - t0, "tokenize_s": t2 - t1, "model_s": t3 - t2,
           "peak_mb": peak_mb() - before}  # fmt: skip
    counter = TokenCounter.load(str(models / "topic"))
    t5 = time.perf_counter()
    out["tokens"] = int(counter.count(docs.texts)[0])
    out["count_s"] = time.perf_counter() - t5
    out["count_peak_mb"] = peak_mb() - before
    if whole:  # the tokenizer's own encoding of the whole text (its truncation comes after)
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(models / "topic" / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=max_length)
        t4 = time.perf_counter()
        tokenizer.encode_batch_fast(docs.texts)
        out["whole_s"] = time.perf_counter() - t4
        tokenizer.no_truncation()
        out["whole_tokens"] = len(tokenizer.encode(docs.texts[0], add_special_tokens=False).ids)
        out["whole_peak_mb"] = peak_mb() - before
    return out


def build_models(folder: Path) -> Path:
    """The two classifiers, tiny and random (the cost measured is the text's, not theirs)."""
    from shardwise.demo.tinymodels import build_weborganizer_demo_models

    build_weborganizer_demo_models(folder, [" ".join(WORDS)] * 50)
    return folder


def main() -> None:
    """Each size in a fresh interpreter; the table with ratios to the smallest."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5e3,5e6,5e7", help="text sizes in characters")
    parser.add_argument("--max-length", type=int, default=128, help="inference.max_length")
    parser.add_argument("--whole", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=2, metavar=("MODELS", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        got = child(Path(args.child[0]), int(args.child[1]), args.max_length, args.whole)
        print("RESULT", json.dumps(got))
        return
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    models = build_models(Path(tempfile.mkdtemp()) / "models")
    rows = []
    for size in sizes:
        cmd = [sys.executable, __file__, "--child", str(models), str(size),
               "--max-length", str(args.max_length), "--whole"]  # fmt: skip
        env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
        rows.append((size, json.loads(line.removeprefix("RESULT "))))
    base = rows[0][1]
    print(f"one document, max_length {args.max_length}, two classifiers, CPU; ratios to "
          f"{sizes[0]:,} characters")  # fmt: skip
    head = ("characters", "read s", "tokenize s", "model s", "peak MB", "tokenize x", "peak x",
            "whole-text encode s", "count s", "count peak MB", "whole-count peak MB",
            "count = whole")  # fmt: skip
    print("  ".join(f"{h:>{len(h) if i else 12}}" for i, h in enumerate(head)))
    for size, r in rows:
        cells = (
            f"{size:>12,}",
            f"{r['read_s']:>6.3f}",
            f"{r['tokenize_s']:>10.4f}",
            f"{r['model_s']:>7.3f}",
            f"{r['peak_mb']:>7.1f}",
            f"{r['tokenize_s'] / max(base['tokenize_s'], 1e-6):>10.1f}",
            f"{(r['peak_mb'] + 1) / (base['peak_mb'] + 1):>6.1f}",
            f"{r['whole_s']:>19.3f}",
            f"{r['count_s']:>7.3f}",
            f"{r['count_peak_mb']:>13.1f}",
            f"{r['whole_peak_mb']:>19.1f}",
            f"{'yes' if r['tokens'] == r['whole_tokens'] else 'NO':>13}",
        )
        print("  ".join(cells))


if __name__ == "__main__":
    main()
