"""The prepared GPU check (issue 13): one CUDA GPU, one JSON summary, exit 1 on any mismatch.

Run it on a GPU node (under 8 minutes on an H100-class GPU), e.g. ``srun --gres=gpu:1 --time=15
bench/gpu-check.sh``. It checks, at the real WebOrganizer shape (hidden 768, 12 layers, 12
heads, lengths up to 8,192, four classifiers):

* environment: ``device: auto`` resolves to CUDA; dtype by compute capability (bf16 refused
  below 8.0); the CUDA-marked tests (``pytest -m cuda``);
* engine benchmark: docs/s, tokens/s and model FLOP utilisation (inference time only) against a
  matmul peak measured in the engine's dtype (100 repetitions); pad efficiency, least-padding
  plan vs greedy fill; the attention kernel of padded and unpadded batches;
* bf16 and fp16 argmax agreement with fp32, without and with the re-check (>= 99.9% required
  with it), fraction re-run, its time share, the GPU's fp32/half time per token, finite scores;
* the batch-budget probe with and without a mask, and the kernel each uses (math for masked
  batches is a failure);
* an out-of-memory drill: ``batch_tokens`` far beyond memory, halved until it fits, no row lost;
* no per-batch host synchronisation (``torch.cuda.set_sync_debug_mode``: the number of syncs
  of a ``run()`` must not grow with the number of batches);
* ``run()`` alone vs. with a concurrent ``prepare()`` thread (the job's overlap);
* the demo workflow end to end with ``device: cuda`` (Snakemake, then ``shardwise verify``).

``--cpu`` runs the CPU-safe parts at a tiny shape (CI runs it, so the script does not rot);
CUDA-only sections are reported as skipped there.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from synthetic import (
    Corpus,
    doc_lengths,
    label_profile,
    labelled_corpus,
    measure_peak,
    model_flops,
    trained_models,
)

from shardwise.classify import gpubudget
from shardwise.classify.batching import DEFAULT_MAX_BATCH_DOCS, BatchPolicy
from shardwise.classify.device import select_device, select_dtype
from shardwise.classify.engine import ClassifierSpec, Engine, Prepared
from shardwise.classify.recheck import top2_margins
from shardwise.classify.tokenization import StreamKey, TokenStream
from shardwise.config import InferenceSettings
from shardwise.errors import ModelError

REPO = Path(__file__).resolve().parent.parent
#: The real WebOrganizer shape and the CPU smoke shape.
SHAPES = {
    "cuda": {
        "hidden_size": 768,
        "layers": 12,
        "heads": 12,
        "max_length": 8192,
        "docs": 2000,
        "steps": 300,
        "median_words": 300,
    },
    "cpu": {
        "hidden_size": 64,
        "layers": 2,
        "heads": 2,
        "max_length": 256,
        "docs": 120,
        "steps": 60,
        "median_words": 60,
    },
}
#: Agreement with fp32 the re-check must reach.
REQUIRED_AGREEMENT = 0.999


@dataclass
class Check:
    """The summary being built, the failures found, and the time left. ``keep``: where the
    summary so far is written after every section (a kill loses only the section it cut)."""

    cuda: bool
    deadline: float
    summary: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    keep: Path | None = None

    def result(self) -> dict[str, Any]:
        """The summary as printed: ok, the failures, every section so far."""
        return {"ok": not self.failures, "failures": self.failures, **self.summary}

    def save(self) -> None:
        """Write the summary so far to ``keep`` (atomically: a kill never leaves half)."""
        if self.keep is None:
            return
        self.keep.parent.mkdir(parents=True, exist_ok=True)
        part = self.keep.with_name(self.keep.name + ".part")
        part.write_text(json.dumps(self.result(), indent=1, default=str) + "\n")
        part.replace(self.keep)

    def fail(self, what: str) -> None:
        self.failures.append(what)
        log(f"FAIL: {what}")

    def expect(self, condition: bool, what: str) -> None:
        if not condition:
            self.fail(what)

    def section(
        self,
        name: str,
        fn: Callable[[], dict[str, Any]],
        *,
        cuda_only: bool = False,
        needs_s: float = 0.0,
    ):
        """Run one section; its failure (an exception, or ``SystemExit`` from code it
        calls) is recorded and the next one runs. A section that cannot finish by the
        deadline (``needs_s``: its estimate) does not start. The summary so far is kept
        after each (:meth:`save`)."""
        if cuda_only and not self.cuda:
            self.summary[name] = {"skipped": "needs CUDA"}
        elif time.monotonic() + needs_s > self.deadline:
            self.summary[name] = {"skipped": f"out of time (needs ~{needs_s:.0f} s)"}
            self.fail(f"{name}: not run, out of time")
        else:
            started = time.monotonic()
            log(f"{name} ...")
            try:
                result = fn()
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - every section reports
                result = {"error": f"{type(exc).__name__}: {exc}"}
                self.fail(f"{name}: {type(exc).__name__}: {exc}")
            result["seconds"] = round(time.monotonic() - started, 1)
            self.summary[name] = result
        self.save()


def log(message: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def environment(check: Check) -> dict[str, Any]:
    out: dict[str, Any] = {
        "host": platform.node(),
        "torch": torch.__version__,
        "torch_version_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    device = select_device("auto")
    out["auto_device"] = str(device)
    out.update(attention_facts())
    if not check.cuda:
        check.expect(device.type == "cpu", f"--cpu: device auto resolved to {device}")
        return out
    check.expect(device.type == "cuda", f"device auto resolved to {device}, not cuda")
    capability = torch.cuda.get_device_capability(device)
    props = torch.cuda.get_device_properties(device)
    expected = torch.bfloat16 if capability >= (8, 0) else torch.float16
    out.update(
        gpu=torch.cuda.get_device_name(device),
        capability=f"{capability[0]}.{capability[1]}",
        memory_gib=round(props.total_memory / 2**30, 1),
        auto_dtype=str(select_dtype("auto", "cuda", capability)),
        tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
    )
    check.expect(
        select_dtype("auto", "cuda", capability) is expected, "dtype auto not by capability"
    )
    if capability < (8, 0):
        try:
            select_dtype("bfloat16", "cuda", capability)
            check.fail("explicit bf16 accepted below compute capability 8.0")
        except ModelError:
            out["bf16_refused"] = True
    check.expect(
        not torch.backends.cuda.matmul.allow_tf32, "TF32 matmul is on: fp32 would not be fp32"
    )
    return out


def attention_facts() -> dict[str, Any]:
    """What decides the packed path's attention here: torch's ``varlen_attn`` (2.10+),
    the flash implementation active in the dispatcher (FA2, torch's own, unless one was
    activated), those registered, and whether FA3's ``flash_attn_interface`` imports."""
    import importlib.util

    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        varlen = False
    else:
        varlen = True
    attn = torch.nn.attention
    current = getattr(attn, "current_flash_attention_impl", None)
    listed = getattr(attn, "list_flash_attention_impls", None)
    try:
        active = current() if current is not None else None
        impls = sorted(listed()) if listed is not None else []
    except Exception as exc:  # noqa: BLE001 - reported, never fatal
        active, impls = f"unknown ({type(exc).__name__}: {exc})", []
    return {
        "varlen_attn": varlen,
        "flash_impl": active or "FA2 (torch's own)",
        "flash_impls_registered": impls,
        "fa3_importable": importlib.util.find_spec("flash_attn_interface") is not None,
    }


def cuda_tests(check: Check) -> dict[str, Any]:
    """``pytest -m cuda``: every CUDA-marked test (CPU mode: the engine's, all skip)."""
    target = "tests" if check.cuda else "tests/classify/test_engine.py"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", target],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)", tail)}
    out = {"returncode": proc.returncode, "summary": tail, **counts}
    if check.cuda:
        passed = proc.returncode == 0 and counts.get("passed", 0) > 0
        check.expect(passed, f"pytest -m cuda: {tail}")
        check.expect(counts.get("skipped", 0) == 0, f"pytest -m cuda skipped tests: {tail}")
    else:
        check.expect(proc.returncode == 0 and counts.get("passed", 0) == 0, f"--cpu: {tail}")
    return out


@dataclass
class Setup:
    """Models, corpus and engines shared by the sections."""

    root: Path
    specs: list[ClassifierSpec]
    corpus: Corpus
    shape: dict[str, int]
    device: str
    engines: dict[str, Engine] = field(default_factory=dict)

    @property
    def texts(self) -> list[str]:
        return self.corpus.texts

    @property
    def urls(self) -> list[str]:
        return self.corpus.urls

    def engine(self, dtype: str, **over: Any) -> Engine:
        key = json.dumps([dtype, over], sort_keys=True)
        if key not in self.engines:
            settings = InferenceSettings(
                max_length=self.shape["max_length"], dtype=dtype, device=self.device, **over
            )
            self.engines[key] = Engine.load(self.specs, settings, cache_root=self.root / "c")
        return self.engines[key]


def build(check: Check, root: Path, docs: int | None) -> Setup:
    shape = dict(SHAPES["cuda" if check.cuda else "cpu"])
    if docs:
        shape["docs"] = docs
    corpus = labelled_corpus(
        shape["docs"],
        seed=0,
        median_words=shape["median_words"],
        max_words=int(shape["max_length"] * 1.5),
    )
    device = "cuda" if check.cuda else "cpu"
    specs = trained_models(
        hidden_size=shape["hidden_size"],
        layers=shape["layers"],
        heads=shape["heads"],
        vocab_size=30000 if check.cuda else 2000,
        steps=shape["steps"],
        device=device,
    )
    return Setup(root, specs, corpus, shape, device)


def benchmark(check: Check, setup: Setup, results: dict[str, Any]) -> dict[str, Any]:
    """The production engine (dtype auto, re-check on) on the corpus; throughput and MFU."""
    engine = setup.engine("auto")
    engine.run(engine.prepare(setup.texts[:32], setup.urls[:32]))  # warm-up, probe
    prepared = engine.prepare(setup.texts, setup.urls)
    inference = engine.infer(prepared)
    _sync(engine.device)
    results["auto"] = inference
    stats = inference.stats
    flops = model_flops(engine, doc_lengths(engine, prepared))
    peak = measure_peak(engine.device, engine.dtype, reps=100)
    plain_s = stats["infer_s"] - stats["recheck_s"]
    docs = len(setup.texts)
    out = {
        "shape": setup.shape,
        "dtype": engine.dtype_name,
        "docs": docs,
        "real_tokens": stats["real_tokens"],
        "docs_per_s": round(docs / stats["infer_s"], 1),
        "tokens_per_s": round(stats["infer_tokens_per_s"], 1),  # per second of inference
        "infer_s": round(stats["infer_s"], 3),
        "recheck_s": round(stats["recheck_s"], 3),
        "peak_tflops": round(peak / 1e12, 2),
        "mfu": round(flops / plain_s / peak, 4) if plain_s > 0 else None,
        "mfu_with_recheck": round(flops / stats["infer_s"] / peak, 4),
        "pad_efficiency": round(stats["pad_efficiency"], 4),
        "batches": stats["batches"],
        "batch_budget": stats["batch_budget"],
        "batch_cost": stats["batch_cost"],
        "probe_s": round(stats["probe_s"], 2),
        "attention_kernel": stats["attention_kernel"],
        "attention_kernel_unmasked": stats["attention_kernel_unmasked"],
        "truncated_docs": stats["truncated_docs"],
        "labels": label_profile(inference.logits, setup.corpus),
    }
    check.expect(stats["docs"] == docs, "benchmark: rows lost")
    if check.cuda:  # an untrained model labels everything alike: agreement would be vacuous
        for name, values in inference.logits.items():
            used = len(set(values.argmax(axis=1).tolist()))
            check.expect(used >= 8, f"benchmark models barely trained: {name} uses {used} labels")
    check.expect(stats["attention_kernel"] != "math", "padded batches use the math kernel")
    for name, values in inference.logits.items():
        check.expect(bool(np.isfinite(values).all()), f"benchmark: non-finite logits in {name}")
    # the least-padding plan against greedy fill, same engine and budget
    greedy = BatchPolicy(budget=engine._policy.budget, max_docs=engine._policy.max_docs)
    planned, engine._policy = engine._policy, greedy
    try:
        started = time.perf_counter()
        fill = engine.infer(prepared).stats
        _sync(engine.device)
        fill_s = time.perf_counter() - started
    finally:
        engine._policy = planned
    out["greedy_fill"] = {
        "pad_efficiency": round(fill["pad_efficiency"], 4),
        "padded_tokens": fill["padded_tokens"],
        "batches": fill["batches"],
        "tokens_per_s": round(fill["real_tokens"] / fill_s, 1),
    }
    out["padded_tokens"] = stats["padded_tokens"]
    out["plan_vs_greedy_speedup"] = round(fill["infer_s"] / stats["infer_s"], 3)
    return out


def agreement(check: Check, setup: Setup, results: dict[str, Any]) -> dict[str, Any]:
    """bf16 and fp16 against fp32, without and with the re-check."""
    fp32 = setup.engine("float32")
    fp32.run(fp32.prepare(setup.texts[:32], setup.urls[:32]))
    reference = fp32.infer(fp32.prepare(setup.texts, setup.urls))
    _sync(fp32.device)
    names = list(reference.logits)
    ref = np.concatenate([reference.logits[n].argmax(1) for n in names])
    out: dict[str, Any] = {"fp32_infer_s": round(reference.stats["infer_s"], 3)}
    for dtype in ("bfloat16", "float16"):
        old_gpu = setup.device == "cuda" and torch.cuda.get_device_capability() < (8, 0)
        if dtype == "bfloat16" and old_gpu:
            out[dtype] = {"skipped": "compute capability < 8.0"}
            continue
        inference = results.get("auto")
        if inference is None or results["auto_dtype"] != dtype:
            engine = setup.engine(dtype)
            engine.run(engine.prepare(setup.texts[:32], setup.urls[:32]))
            inference = engine.infer(engine.prepare(setup.texts, setup.urls))
        stats = inference.stats
        first = np.concatenate([inference.first_pass[n].argmax(1) for n in names])
        final = np.concatenate([inference.logits[n].argmax(1) for n in names])
        plain_s = stats["infer_s"] - stats["recheck_s"]
        rerun = sum(stats["rechecked_docs"].values())
        row = {
            "agreement_plain": round(float((first == ref).mean()), 5),
            "agreement_recheck": round(float((final == ref).mean()), 5),
            "labels": len(ref),
            "fraction_rerun": round(rerun / len(ref), 5),
            "token_share": round(stats["recheck_tokens"] / max(1, stats["real_tokens"]), 5),
            "recheck_time_share": round(stats["recheck_s"] / plain_s, 4) if plain_s else None,
            "fp32_over_half_time": round(reference.stats["infer_s"] / plain_s, 2)
            if plain_s
            else None,
            "changed": stats["recheck_changed"],
            "nonfinite": stats["nonfinite_docs"],
            "max_margin_error": stats["recheck_max_margin_error"],
            "margin": stats["recheck_margin"],
            "calibration": stats.get("calibration"),
            "calibration_time_share": round(stats.get("calibration_s", 0.0) / plain_s, 4)
            if plain_s
            else None,
        }
        out[dtype] = row
        check.expect(
            row["agreement_recheck"] >= REQUIRED_AGREEMENT,
            f"{dtype} + re-check agrees with fp32 on {row['agreement_recheck']:.4%} of labels "
            f"(< {REQUIRED_AGREEMENT:.1%}): the calibrated re-check threshold "
            f"({stats.get('calibration')}) is too small on this GPU",
        )
        for name in names:
            check.expect(
                bool(np.isfinite(inference.logits[name]).all()), f"{dtype}: non-finite {name}"
            )
    return out


def probe(check: Check, setup: Setup) -> dict[str, Any]:
    """The budget probe with the mask padded batches carry, and without (flash)."""
    engine = setup.engine("auto")
    out = {}
    for masked in (True, False):
        started = time.perf_counter()
        budget, kernel = gpubudget.probe_budget(engine, masked=masked)
        out["masked" if masked else "unmasked"] = {
            "budget_tokens": budget,
            "kernel": kernel,
            "seconds": round(time.perf_counter() - started, 2),
        }
        torch.cuda.empty_cache()
    check.expect(out["masked"]["kernel"] != "math", "masked probe ran the math kernel")
    check.expect(out["masked"]["budget_tokens"] > 0, "probe found no budget")
    return out


def oom_drill(check: Check, setup: Setup) -> dict[str, Any]:
    """An absurd ``batch_tokens``: the first batch must run out of memory, halve, lose nothing."""
    length = setup.shape["max_length"]
    spec = setup.specs[:1]
    engine = Engine.load(  # no re-check: fp32 at 8,192 tokens would dominate the drill's time
        spec,
        InferenceSettings(
            max_length=length, device="cuda", batch_tokens=1 << 40, recheck_margin=0.0
        ),
        cache_root=setup.root / "c",
    )
    clf = engine._classifiers[0]
    free, _ = torch.cuda.mem_get_info(engine.device)
    hidden = clf.loaded.model.config.hidden_size
    inner = clf.loaded.model.config.intermediate_size
    per_token = engine.dtype.itemsize * (8 * hidden + 3 * inner)
    rows = min(DEFAULT_MAX_BATCH_DOCS, int(2 * free / (per_token * length)) + 1)
    one = _clear_document(engine, clf.key, length)
    ids = np.tile(one, rows)  # every document identical: every label must be the same
    stream = TokenStream(
        ids=ids,
        offsets=np.arange(rows + 1, dtype=np.int64) * length,
        lengths=np.full(rows, length, dtype=np.int32),
        pad_id=0,
        truncated=np.zeros(rows, dtype=bool),
    )
    prepared = Prepared(docs=rows, streams={clf.key: stream}, tokenize_s=0.0)
    single = Prepared(docs=1, streams={clf.key: _first(stream)}, tokenize_s=0.0)
    started = time.perf_counter()
    labels = engine.run(prepared)
    seconds = time.perf_counter() - started
    expected = engine.run(single).columns[f"{clf.spec.name}_label_id"].to_pylist()[0]
    got = labels.columns[f"{clf.spec.name}_label_id"].to_numpy()
    out = {
        "rows": rows,
        "first_batch_tokens": rows * length,
        "oom_retries": labels.stats["oom_retries"],
        "final_budget": labels.stats["batch_budget"],
        "labelled_rows": len(got),
        "same_label_everywhere": bool((got == expected).all()),
        "seconds": round(seconds, 1),
    }
    check.expect(labels.stats["oom_retries"] >= 1, "OOM drill: no out-of-memory happened")
    check.expect(len(got) == rows, f"OOM drill: {len(got)} of {rows} rows labelled")
    check.expect(out["same_label_everywhere"], "OOM drill: identical documents got other labels")
    return out


def _single(ids: np.ndarray) -> TokenStream:
    return TokenStream(
        ids=ids,
        offsets=np.array([0, len(ids)], dtype=np.int64),
        lengths=np.array([len(ids)], dtype=np.int32),
        pad_id=0,
        truncated=np.zeros(1, dtype=bool),
    )


def _first(stream: TokenStream) -> TokenStream:
    return _single(stream.ids[: int(stream.lengths[0])].copy())


def _clear_document(engine: Engine, key: StreamKey, length: int) -> np.ndarray:
    """Random ids whose label is no near tie (top-two margin > 1), so batching cannot flip it."""
    vocab = engine._classifiers[0].loaded.model.config.vocab_size
    rng = np.random.default_rng(0)
    for _ in range(20):
        ids = rng.integers(5, vocab, size=length, dtype=np.int32)
        prepared = Prepared(docs=1, streams={key: _single(ids)}, tokenize_s=0.0)
        logits = next(iter(engine.infer(prepared).logits.values()))
        if float(top2_margins(logits)[0]) > 1.0:
            return ids
    return ids


def _count_syncs(engine: Engine, prepared: Prepared) -> tuple[int, int]:
    """(host synchronisations, batches) of one ``run()``, via torch's sync debug mode."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            labels = engine.run(prepared)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = sum("synchroniz" in str(w.message).lower() for w in caught)
    return syncs, labels.stats["batches"] + labels.stats["recheck_batches"]


def no_sync(check: Check, setup: Setup) -> dict[str, Any]:
    """The number of syncs of a run must not depend on the number of batches.

    One engine, its settings and batch policies swapped (loading four engines would cost more
    than the check): re-check off, and re-check of every document; a big and a small budget.
    """
    engine = setup.engine("auto")
    saved = (engine.settings, engine._policy, engine._recheck_policy)
    out = {}
    texts, urls = setup.texts[:400], setup.urls[:400]
    prepared = engine.prepare(texts, urls)
    try:
        for margin in (0.0, 1e9):
            engine.settings = dataclasses.replace(saved[0], recheck_margin=margin)
            counts = []
            for budget in (1 << 16, 1 << 13):
                engine._policy = BatchPolicy(budget=budget, batch_cost=engine.batch_cost)
                engine._recheck_policy = None
                engine.run(prepared)  # warm-up: allocator, the re-check policy
                counts.append(_count_syncs(engine, prepared))
            (syncs_a, batches_a), (syncs_b, batches_b) = counts
            out[f"margin_{margin:g}"] = {
                "syncs": [syncs_a, syncs_b],
                "batches": [batches_a, batches_b],
            }
            check.expect(batches_b > batches_a, "sync check: a small budget made no more batches")
            check.expect(
                syncs_a == syncs_b,
                f"host syncs grow with batches (margin {margin:g}): {syncs_a} syncs for "
                f"{batches_a} batches, {syncs_b} for {batches_b}",
            )
    finally:
        engine.settings, engine._policy, engine._recheck_policy = saved
    return out


def overlap(check: Check, setup: Setup) -> dict[str, Any]:
    """``run()`` alone vs. while another thread runs ``prepare()`` (what job.py does)."""
    engine = setup.engine("auto")
    prepared = engine.prepare(setup.texts, setup.urls)
    engine.run(prepared)
    started = time.perf_counter()
    alone = engine.run(prepared)
    _sync(engine.device)
    alone_s = time.perf_counter() - started
    stop = threading.Event()
    prepares = [0]

    def tokenize() -> None:
        while not stop.is_set():
            engine.prepare(setup.texts[::-1], setup.urls[::-1])
            prepares[0] += 1

    worker = threading.Thread(target=tokenize, daemon=True)
    worker.start()
    try:
        started = time.perf_counter()
        busy = engine.run(prepared)
        _sync(engine.device)
        busy_s = time.perf_counter() - started
    finally:
        stop.set()
        worker.join()
    names = list(engine.labels)
    same = all(alone.columns[f"{n}_label_id"].equals(busy.columns[f"{n}_label_id"]) for n in names)
    out = {
        "run_alone_s": round(alone_s, 3),
        "run_with_prepare_s": round(busy_s, 3),
        "slowdown": round(busy_s / alone_s, 3),
        "prepares_during_run": prepares[0],
        "same_labels": same,
    }
    check.expect(busy.stats["docs"] == alone.stats["docs"], "overlap: rows differ")
    return out


def demo(check: Check, root: Path) -> dict[str, Any]:
    """The demo workflow end to end on this device (Snakemake, local executor, then verify)."""
    from shardwise.demo.corpus import DemoSize, write_demo

    size = None if check.cuda else DemoSize(files_per_category=1, docs_per_file=6)
    config_path = write_demo(root / "demo", size)
    config = yaml.safe_load(config_path.read_text())
    device = "cuda" if check.cuda else "cpu"
    config["inference"]["device"] = device
    config_path.write_text(yaml.safe_dump(config))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(root / "demo"), "--configfile", str(config_path),
        "--profile", str(REPO / "profiles" / "local"),
    ]  # fmt: skip
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        check=False,
    )
    out: dict[str, Any] = {"snakemake_returncode": proc.returncode}
    if proc.returncode != 0:
        check.fail(f"demo: snakemake failed: {proc.stderr[-1500:]}")
        return out
    run_dir = config["run_dir"]
    shardwise = str(Path(sys.executable).parent / "shardwise")
    verify = subprocess.run(
        [shardwise, "verify", "--run-dir", run_dir, "--complete"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    out["verify_returncode"] = verify.returncode
    check.expect(verify.returncode == 0, f"demo: verify failed: {verify.stdout[-1500:]}")
    stats = [json.loads(p.read_text()) for p in Path(config["output"]["uri"]).rglob("*.stats.json")]
    out["files"] = len(stats)
    out["devices"] = sorted({s["device"] for s in stats})
    out["dtypes"] = sorted({s["dtype"] for s in stats})
    out["rechecked_docs"] = sum(sum(s["engine"]["rechecked_docs"].values()) for s in stats)
    check.expect(bool(stats), "demo: no stats written")
    check.expect(
        all(s["device"].startswith(device) for s in stats), f"demo: devices {out['devices']}"
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cpu", action="store_true", help="CPU smoke mode: tiny shape, CUDA-only parts skipped"
    )
    parser.add_argument("--docs", type=int, default=None, help="benchmark corpus size")
    parser.add_argument(
        "--budget-s", type=float, default=400, help="seconds after which no section starts"
    )
    parser.add_argument("--skip-demo", action="store_true", help="skip the demo workflow")
    parser.add_argument("--skip-tests", action="store_true", help="skip pytest -m cuda")
    args = parser.parse_args()
    started = time.monotonic()
    check = Check(cuda=not args.cpu, deadline=started + args.budget_s)
    if check.cuda and not torch.cuda.is_available():
        check.fail(f"no usable CUDA device: torch {torch.__version__}, cuda {torch.version.cuda}")
        print(json.dumps({"ok": False, "failures": check.failures}, indent=2))
        return 1
    if args.cpu:
        torch.set_num_threads(min(2, os.cpu_count() or 1))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="shardwise-gpu-check-") as tmp:
        root = Path(tmp)
        check.section("environment", lambda: environment(check))
        if not args.skip_tests:
            check.section("cuda_tests", lambda: cuda_tests(check))
        if not args.skip_demo:  # first, while the GPU's memory is free for its jobs
            check.section("demo_workflow", lambda: demo(check, root))
        holder: dict[str, Setup] = {}

        def models() -> dict[str, Any]:
            holder["setup"] = setup = build(check, root, args.docs)
            results["auto_dtype"] = setup.engine("auto").dtype_name
            return {"shape": setup.shape, "models": [s.model for s in setup.specs]}

        check.section("models", models)
        setup = holder.get("setup")
        if setup is not None:
            check.section("benchmark", lambda: benchmark(check, setup, results))
            check.section("agreement", lambda: agreement(check, setup, results))
            check.section("probe", lambda: probe(check, setup), cuda_only=True)
            check.section("no_per_batch_sync", lambda: no_sync(check, setup), cuda_only=True)
            check.section("overlap", lambda: overlap(check, setup))
            setup.engines.clear()  # the drill wants the memory
            gc.collect()
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
            check.section("oom_drill", lambda: oom_drill(check, setup), cuda_only=True)
    check.summary["elapsed_s"] = round(time.monotonic() - started, 1)
    print(
        json.dumps(
            {"ok": not check.failures, "failures": check.failures, **check.summary},
            indent=2,
            default=str,
        )
    )
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
