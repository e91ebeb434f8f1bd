"""Benchmark the classification engine against the two usual ways of running the classifiers.

One run, per model shape, one synthetic corpus (lognormal lengths with a tail past the truncation
length, documents mixing topics) and four GTE classifiers built offline in the WebOrganizer "new"
format (two URL, two NoURL variants; std 0.02 init then trained briefly so labels depend on the
input like a trained model's, cached: see ``bench/synthetic.py``):

  (a) fixed batches of 32 in input order, tokenizing per classifier (today's launcher);
  (b) sorted by length, fixed batches of 32, tokenizing per classifier (NeMo Curator's approach);
  (c) shardwise's engine: shared tokenization, longest-first batches cut at the least padding
      plus per-batch cost under a padded-token budget, classifiers sharing an id stream run on
      the same collated batch.

Two shapes by default, because the ratios differ: ``tiny`` (hidden 32, 2 layers: per-batch
overhead dominates, ratios flatter the engine) and ``proxy`` (hidden 256, 4 layers, 4 heads:
closer to the real hidden 768 x 12 layers, where padded tokens are what costs). For each: docs/s
and tokens/s (real tokens, summed over the four classifiers), c/a and c/b, the padded tokens of
(b) and (c) and the engine's pad efficiency, argmax agreement of (c) with (a) and (b), and the
model FLOP utilisation of (c) from its inference time against a matmul peak measured in the
engine's dtype (100 repetitions).

    python bench/classify.py                      # CPU, both shapes, ~10 minutes on 2 cores
    python bench/classify.py --shapes proxy --skip-a --threads 2
    python bench/classify.py --device cuda --shapes real --docs 20000 --skip-a
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

import numpy as np
import torch
from synthetic import (
    doc_lengths,
    label_profile,
    labelled_corpus,
    measure_peak,
    model_flops,
    trained_models,
)

from shardwise.classify.engine import Engine
from shardwise.config import InferenceSettings

#: name -> (hidden, layers, heads, default docs)
SHAPES = {
    "tiny": (32, 2, 2, 600),
    "proxy": (256, 4, 4, 300),
    "real": (768, 12, 12, 20000),
}


def _strings(kind: str, texts: list[str], urls: list[str]) -> list[str]:
    if kind == "url_text":
        return [f"{u}\n\n{t}" for t, u in zip(texts, urls, strict=True)]
    return list(texts)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_fixed_input_order(engine: Engine, texts, urls, max_length: int) -> dict[str, np.ndarray]:
    """(a) per classifier: tokenize each batch of 32 in input order, pad to its longest, run."""
    out = {}
    for clf in engine._classifiers:
        tok, model = clf.loaded.tokenizer, clf.loaded.model
        strings = _strings(clf.spec.input, texts, urls)
        ids = []
        for start in range(0, len(strings), 32):
            batch = tok(
                strings[start : start + 32],
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            ).to(engine.device)
            with torch.inference_mode():
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
            ids.append(logits.logits.float().argmax(-1).cpu())
        out[clf.spec.name] = torch.cat(ids).numpy()
    _sync(engine.device)
    return out


def run_sorted_fixed(
    engine: Engine, texts, urls, max_length: int, padded: list[int]
) -> dict[str, np.ndarray]:
    """(b) per classifier: tokenize all, sort by length, batches of 32, restore order.

    Appends the padded tokens it computes (rows x longest row, every batch) to ``padded``.
    """
    out = {}
    for clf in engine._classifiers:
        tok, model = clf.loaded.tokenizer, clf.loaded.model
        strings = _strings(clf.spec.input, texts, urls)
        encoded = tok(strings, truncation=True, max_length=max_length)["input_ids"]
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
        result = np.empty(len(encoded), dtype=np.int64)
        pad = tok.pad_token_id or 0
        for start in range(0, len(order), 32):
            rows = order[start : start + 32]
            seqs = [torch.tensor(encoded[i]) for i in rows]
            ids = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=pad)
            padded.append(int(ids.numel()))
            mask = torch.nn.utils.rnn.pad_sequence(
                [torch.ones(len(s), dtype=torch.long) for s in seqs], batch_first=True
            )
            with torch.inference_mode():
                logits = model(
                    input_ids=ids.to(engine.device), attention_mask=mask.to(engine.device)
                ).logits
            result[rows] = logits.float().argmax(-1).cpu().numpy()
        out[clf.spec.name] = result
    _sync(engine.device)
    return out


def run_engine(engine: Engine, texts, urls) -> tuple[dict[str, np.ndarray], dict]:
    """(c) the engine as job.py uses it (prepare then run; no overlap counted here)."""
    inference = engine.infer(engine.prepare(texts, urls))
    _sync(engine.device)
    ids = {name: values.argmax(axis=1) for name, values in inference.logits.items()}
    return ids, inference.stats | {"logits": inference.logits}


def timed(fn: Callable[[], object]) -> tuple[object, float, float]:
    """Run and time ``fn``; also the 1-minute load average at its end (hosts may be shared)."""
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started, os.getloadavg()[0]


def bench_shape(name: str, args: argparse.Namespace) -> None:
    hidden, layers, heads, default_docs = SHAPES[name]
    docs = args.docs or default_docs
    corpus = labelled_corpus(
        docs,
        seed=args.seed,
        median_words=args.median_words,
        sigma=args.sigma,
        max_words=int(args.max_length * 1.5),
    )
    texts, urls = corpus.texts, corpus.urls
    specs = trained_models(
        hidden_size=hidden,
        layers=layers,
        heads=heads,
        vocab_size=args.vocab_size,
        device=args.device,
    )
    settings = InferenceSettings(
        max_length=args.max_length,
        dtype=args.dtype,
        device=args.device,
        batch_tokens=args.batch_tokens,
    )
    engine = Engine.load(specs, settings)
    prepared = engine.prepare(texts, urls)
    lengths = doc_lengths(engine, prepared)
    tokens = int(sum(x.sum() for x in lengths))
    all_lengths = np.concatenate(lengths)
    print(
        f"\n== {name} shape: hidden {hidden}, {layers} layers, {heads} heads; {docs} docs, "
        f"max_length {args.max_length}; tokens/doc median {int(np.median(all_lengths))}, "
        f"p99 {int(np.percentile(all_lengths, 99))}, at max "
        f"{int((all_lengths >= args.max_length).sum() // 4)} docs; {tokens} real tokens over "
        f"the 4 classifiers; device {engine.device_name}, dtype {engine.dtype_name}"
    )
    run_engine(engine, texts[:64], urls[:64])  # warm-up (and the CUDA budget probe)
    results: dict[str, tuple[dict[str, np.ndarray], float, float]] = {}
    if not args.skip_a:
        results["a"] = timed(lambda: run_fixed_input_order(engine, texts, urls, args.max_length))
    b_padded: list[int] = []
    results["b"] = timed(lambda: run_sorted_fixed(engine, texts, urls, args.max_length, b_padded))
    (c_ids, c_stats), c_s, c_load = timed(lambda: run_engine(engine, texts, urls))
    results["c"] = (c_ids, c_s, c_load)
    print(f"labels of (c): {label_profile(c_stats['logits'], corpus)}")
    titles = {
        "a": "(a) fixed 32, input order, per-classifier tokenize",
        "b": "(b) sorted, fixed 32, per-classifier tokenize    ",
        "c": "(c) shardwise engine                              ",
    }
    for key, (_, seconds, load) in results.items():
        print(
            f"{titles[key]} {seconds:8.2f} s  {docs / seconds:9.1f} docs/s  "
            f"{tokens / seconds:12.0f} tokens/s  (load {load:.1f})"
        )
    b_pad = sum(b_padded)
    print(
        f"padded tokens: (b) {b_pad} (pad efficiency {tokens / b_pad:.3f}), (c) "
        f"{c_stats['padded_tokens']} (pad efficiency {c_stats['pad_efficiency']:.3f}); "
        f"engine: budget {c_stats['batch_budget']}, batch cost {c_stats['batch_cost']}, "
        f"{c_stats['batches']} batches, tokenize {c_stats['tokenize_s']:.2f} s, infer "
        f"{c_stats['infer_s']:.2f} s"
    )
    if "a" in results:
        print(f"c/a = {results['a'][1] / c_s:.2f}")
    print(
        f"c/b = {results['b'][1] / c_s:.2f}  (CPU time only: on a GPU, (b)'s fixed 32-row "
        "batches of short documents also leave the device mostly idle, which a CPU cannot show)"
    )
    for key in ("a", "b"):
        if key in results:
            agree = np.mean([np.mean(results[key][0][s.name] == c_ids[s.name]) for s in specs])
            print(f"argmax agreement c vs {key}: {agree:.4f}")
    peak = measure_peak(engine.device, engine.dtype, reps=100)
    flops = model_flops(engine, lengths)
    print(
        f"MFU (c, inference time {c_stats['infer_s']:.2f} s): "
        f"{flops / c_stats['infer_s'] / peak:.3f} ({flops / c_stats['infer_s'] / 1e12:.3f} "
        f"TFLOP/s achieved, measured {engine.dtype_name} matmul peak {peak / 1e12:.3f} TFLOP/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--shapes", default="tiny,proxy", help=f"comma-separated, from {list(SHAPES)}"
    )
    parser.add_argument("--docs", type=int, default=None, help="documents (default per shape)")
    parser.add_argument("--max-length", type=int, default=2048, help="truncation length")
    parser.add_argument("--median-words", type=float, default=220.0, help="median doc length")
    parser.add_argument("--sigma", type=float, default=1.0, help="lognormal sigma of lengths")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="auto", help="engine dtype")
    parser.add_argument("--batch-tokens", type=int, default=None, help="engine token budget")
    parser.add_argument("--vocab-size", type=int, default=4000, help="tokenizer vocabulary")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--skip-a", action="store_true", help="skip the slow baseline (a)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"host {platform.node()} cpus={os.cpu_count()} torch_threads={torch.get_num_threads()}"
        f" load={os.getloadavg()[0]:.1f}"
    )
    for name in args.shapes.split(","):
        bench_shape(name.strip(), args)


if __name__ == "__main__":
    main()
