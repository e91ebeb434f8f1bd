"""Benchmark the classification engine against the two usual ways of running the classifiers.

One run, one synthetic corpus (lognormal lengths with a tail past the truncation length), four
GTE classifiers built offline in the WebOrganizer "new" format (two URL, two NoURL variants):

  (a) fixed batches of 32 in input order, tokenizing per classifier (today's launcher);
  (b) sorted by length, fixed batches of 32, tokenizing per classifier (NeMo Curator's approach);
  (c) shardwise's engine: shared tokenization, longest-first batches under a padded-token
      budget, classifiers sharing an id stream run on the same collated batch.

Prints docs/s and tokens/s (real tokens, summed over the four classifiers) for each and the
ratios c/a and c/b. With ``--device cuda`` it also prints the model FLOP utilisation of (c)
against a measured bf16 matmul peak and the bf16-vs-fp32 argmax agreement on the same docs.

    python bench/classify.py                      # CPU, tiny models, ~2-3 minutes on 2 cores
    python bench/classify.py --device cuda --docs 20000 --hidden-size 768 --layers 12 --heads 12
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from shardwise.engine import ClassifierSpec, Engine, InferenceSettings
from shardwise.tinymodels import (
    build_tiny_gte_classifier,
    build_wordpiece_tokenizer,
    synthetic_corpus,
    weborganizer_labels,
)

PLAN = (
    ("topic", "topic", "url_text"),
    ("topic_nourl", "topic", "text"),
    ("format", "format", "url_text"),
    ("format_nourl", "format", "text"),
)


def build_models(root: Path, texts: list[str], args: argparse.Namespace) -> list[ClassifierSpec]:
    """Four classifiers sharing one tokenizer, like the real WebOrganizer set."""
    labels = weborganizer_labels()
    build_wordpiece_tokenizer(texts[:2000], root / "tokenizer", vocab_size=args.vocab_size)
    specs = []
    for seed, (name, label_key, kind) in enumerate(PLAN):
        path = build_tiny_gte_classifier(
            root / name,
            labels[label_key],
            root / "tokenizer",
            seed=seed,
            hidden_size=args.hidden_size,
            num_layers=args.layers,
            num_heads=args.heads,
            new_format=True,
        )
        specs.append(ClassifierSpec(name, str(path), kind))
    return specs


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


def run_sorted_fixed(engine: Engine, texts, urls, max_length: int) -> dict[str, np.ndarray]:
    """(b) per classifier: tokenize all, sort by length, batches of 32, restore order."""
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
    labels = engine.run(engine.prepare(texts, urls))
    _sync(engine.device)
    ids = {
        clf.spec.name: labels.columns[f"{clf.spec.name}_label_id"].to_numpy()
        for clf in engine._classifiers
    }
    return ids, labels.stats


LOADS: dict[str, float] = {}


def timed(key: str, fn: Callable[[], object]) -> tuple[object, float]:
    """Run and time ``fn``; note the 1-minute load average at its end (hosts may be shared)."""
    started = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - started
    LOADS[key] = os.getloadavg()[0]
    return value, seconds


def real_tokens(engine: Engine, texts, urls) -> tuple[int, list[np.ndarray]]:
    prepared = engine.prepare(texts, urls)
    lengths = [prepared.streams[c.key].lengths.astype(np.int64) for c in engine._classifiers]
    return int(sum(x.sum() for x in lengths)), lengths


def measure_bf16_peak(device: torch.device) -> float:
    """Dense bf16 matmul throughput (FLOP/s) on this GPU: the MFU denominator."""
    size = 8192
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(device)
    reps = 20
    started = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize(device)
    return 2 * size**3 * reps / (time.perf_counter() - started)


def model_flops(engine: Engine, lengths: list[np.ndarray]) -> float:
    """2 x non-embedding params x real tokens + attention (4 x layers x hidden x L^2 per doc)."""
    total = 0.0
    for clf, per_doc in zip(engine._classifiers, lengths, strict=True):
        config = clf.loaded.model.config
        params = clf.loaded.num_parameters - clf.loaded.num_embedding_parameters
        attention = 4.0 * config.num_hidden_layers * config.hidden_size * float((per_doc**2).sum())
        total += 2.0 * params * float(per_doc.sum()) + attention
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=600)
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--median-words", type=float, default=220.0)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--batch-tokens", type=int, default=None)
    parser.add_argument("--hidden-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--skip-a", action="store_true", help="skip the slow baseline (a)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    texts, urls = synthetic_corpus(
        args.docs,
        seed=args.seed,
        median_words=args.median_words,
        sigma=args.sigma,
        max_words=int(args.max_length * 1.5),
        tail_fraction=0.02,
    )
    with tempfile.TemporaryDirectory(prefix="shardwise-bench-") as tmp:
        root = Path(tmp)
        specs = build_models(root / "models", texts, args)
        settings = InferenceSettings(
            max_length=args.max_length,
            dtype=args.dtype,
            device=args.device,
            batch_tokens=args.batch_tokens,
        )
        engine = Engine.load(specs, settings, cache_root=root / "cache")
        tokens, lengths = real_tokens(engine, texts, urls)
        print(
            f"host {platform.node()} cpus={os.cpu_count()} torch_threads={torch.get_num_threads()}"
            f" device={engine.device_name} dtype={engine.dtype_name} load={os.getloadavg()[0]:.1f}"
        )
        all_lengths = np.concatenate(lengths)
        print(
            f"corpus: {args.docs} docs, 4 classifiers (hidden {args.hidden_size}, {args.layers} "
            f"layers, {args.heads} heads), max_length {args.max_length}; tokens/doc median "
            f"{int(np.median(all_lengths))}, p99 {int(np.percentile(all_lengths, 99))}, "
            f"at max {int((all_lengths >= args.max_length).sum() // 4)} docs; "
            f"{tokens} real tokens over the 4 classifiers"
        )
        run_engine(engine, texts[:64], urls[:64])  # warm-up (and the CUDA budget probe)
        results: dict[str, tuple[dict[str, np.ndarray], float]] = {}
        if not args.skip_a:
            results["a"] = timed(
                "a", lambda: run_fixed_input_order(engine, texts, urls, args.max_length)
            )
        results["b"] = timed("b", lambda: run_sorted_fixed(engine, texts, urls, args.max_length))
        (c_ids, c_stats), c_s = timed("c", lambda: run_engine(engine, texts, urls))
        results["c"] = (c_ids, c_s)
        titles = {
            "a": "(a) fixed 32, input order, per-classifier tokenize",
            "b": "(b) sorted, fixed 32, per-classifier tokenize    ",
            "c": "(c) shardwise engine                              ",
        }
        for key, (_, seconds) in results.items():
            load = LOADS[key]
            print(
                f"{titles[key]} {seconds:8.2f} s  {args.docs / seconds:9.1f} docs/s  "
                f"{tokens / seconds:12.0f} tokens/s  (load {load:.1f})"
            )
        print(
            f"engine: batch_budget {c_stats['batch_budget']}, batches {c_stats['batches']}, "
            f"pad_efficiency {c_stats['pad_efficiency']:.3f}, "
            f"tokenize {c_stats['tokenize_s']:.2f} s, infer {c_stats['infer_s']:.2f} s, "
            f"tokenize fallbacks {c_stats['tokenize_fallback_docs']}, "
            f"oom_retries {c_stats['oom_retries']}"
        )
        if "a" in results:
            print(f"c/a = {results['a'][1] / c_s:.2f}  (target >= 10 on CPU)")
        print(f"c/b = {results['b'][1] / c_s:.2f}  (target >= 1.25 on CPU)")
        for key in ("a", "b"):
            if key in results:
                agree = np.mean([np.mean(results[key][0][s.name] == c_ids[s.name]) for s in specs])
                print(f"argmax agreement c vs {key}: {agree:.4f}")

        if engine.device.type == "cuda":
            peak = measure_bf16_peak(engine.device)
            flops = model_flops(engine, lengths)
            print(
                f"MFU (c): {flops / c_s / peak:.3f}  ({flops / c_s / 1e12:.1f} TFLOP/s achieved, "
                f"measured bf16 matmul peak {peak / 1e12:.1f} TFLOP/s)"
            )
            if engine.dtype != torch.float32:
                fp32 = Engine.load(
                    specs,
                    InferenceSettings(
                        max_length=args.max_length, dtype="float32", device=args.device
                    ),
                    cache_root=root / "cache",
                )
                ref_ids, _ = run_engine(fp32, texts, urls)
                for spec in specs:
                    agree = float(np.mean(ref_ids[spec.name] == c_ids[spec.name]))
                    print(
                        f"{engine.dtype_name}-vs-float32 argmax agreement {spec.name}: {agree:.4f}"
                    )


if __name__ == "__main__":
    main()
