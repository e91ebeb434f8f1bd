"""The GPU check in five minutes on one GPU, without network: one JSON of per-classifier figures.

``bench/gpu-check.sh --quick`` runs this after installing ``bench/.gpu-wheels/`` (made by
``--prepare`` where there is network). The plan, with its time budget on one H100
(``--budget-s``: no section starts after it; the whole command is killed at 300 s):

=====================  =====  ===============================================================
section                 est.  what
=====================  =====  ===============================================================
wheels (the .sh)         20 s  transformers at the project's pin, zstandard, shardwise
environment               5 s  device auto, dtype, varlen kernel, TF32 off
models                   40 s  the four classifiers at the real shape (hidden 768, 12
                               layers), trained briefly so labels mean something
throughput              110 s  per classifier, padded, packed and packed compiled (fused;
                               FA3 where installed on Hopper: its kernel says), fixed 512
                               and a Dolma-like mix (mean ~1,600, token-weighted ~3,400):
                               tokens/s and MFU against 989 TFLOP/s; the self-check's verdict
agreement                30 s  bf16 against fp32 labels per classifier, padded and packed
startup                  40 s  two shard jobs' start-up (fresh processes): imports, loads,
                               probe and compile, the first with no compile cache (cold),
                               the second from the artifact the first kept (warm), share
                               of 360 s
recheck                  25 s  per classifier, the production forward on half the mix with
                               the fp32 re-check of near ties (auto) against without it:
                               tokens/s each way, the re-check's share of engine time
=====================  =====  ===============================================================

Without CUDA it stops at once with one line naming CUDA (exit 2). Exit 1 when a packed
forward failed its self-check or labelled otherwise than padded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

#: The MFU denominator: H100/H200 SXM dense bf16 (the issue's and docs/engine.md's figure).
PEAK_FLOPS = 989e12
#: A Dolma-like length mix, the docs' table's (docs/engine.md): lognormal with mean ~1,600
#: and a token-weighted length E[L^2]/E[L] ~3,400 *after* the 8,192 cap (fitted: 1,597 and
#: 3,392 over 2M draws). The old draw, 3,400 before the cap, was 2,939 after it: easier.
MIX_MU, MIX_SIGMA = 6.91, 1.02
#: The docs' table's token-weighted length, stated beside the mix's own.
TABLE_TOKEN_WEIGHTED = 3400
#: Each section's seconds on one H100 (the plan above): none starts that cannot end by the
#: deadline. On the CPU (``--cpu``, CI) nothing is estimated.
NEEDS_S = {"environment": 5, "models": 40, "throughput": 110, "recheck": 25, "agreement": 30,
           "startup": 40}  # fmt: skip
#: The throughput section's forwards: (inference.attention, inference.compile).
VARIANTS = {"padded": ("padded", "off"), "packed": ("packed", "off"), "compiled": ("packed", "on")}
#: Where the summary so far is kept after every section: ``$OUT/gpu-quick.json`` when OUT is
#: set (a lent GPU machine brings $OUT back even after a kill), else ``bench/out/``.
KEEP_NAME = "gpu-quick.json"
#: What the check carries (``--prepare``'s wheels): (module, distribution). Each must be
#: the project's exact pin (shardwise's requirements, as carried).
CARRIED = (("transformers", "transformers"), ("tokenizers", "tokenizers"),
           ("zstandard", "zstandard"), ("shardwise", "shardwise"))  # fmt: skip
#: What the check takes from the GPU image as it is: (module, distribution, floor). Each
#: must import and be at least its floor, and what every carried package requires of it
#: (transformers' own requirements, say); the project's exact pins do not apply.
IMAGE = (("torch", "torch", "2.10"),  # torch.nn.attention.varlen (the packed forward)
         ("numpy", "numpy", "1.26"),
         ("pyarrow", "pyarrow", "15.0"),
         ("safetensors", "safetensors", "0.4.3"),
         ("huggingface_hub", "huggingface-hub", "1.0"))  # fmt: skip
#: The real shape on CUDA; ``--cpu``: a tiny one, so CI runs every section (nothing timed
#: there means anything). ``tokens``: per timed measurement (about a second on an H100);
#: ``steps``: training steps per task, enough for labels that are not all ties.
SHAPES = {
    "cuda": {"hidden_size": 768, "layers": 12, "heads": 12, "vocab_size": 30000,
             "steps": 60, "tokens": 1_000_000, "docs": 400, "max_length": 8192},
    "cpu": {"hidden_size": 32, "layers": 2, "heads": 2, "vocab_size": 2000,
            "steps": 10, "tokens": 20_000, "docs": 24, "max_length": 2048},
}  # fmt: skip


def cuda_or_exit() -> None:
    """Stop at once, in one line, where there is no CUDA (no traceback, no section run)."""
    import torch

    if torch.cuda.is_available():
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    print(
        f"gpu-check --quick: CUDA is not available here (torch {torch.__version__}, "
        f"torch.version.cuda={torch.version.cuda}, CUDA_VISIBLE_DEVICES={visible}): "
        "run it on a node with one CUDA GPU (docs/engine.md, 'The GPU check in five minutes')",
        file=sys.stderr,
    )
    raise SystemExit(2)


def keep_path() -> Path:
    """Where the summary so far is written (:data:`KEEP_NAME`)."""
    out = os.environ.get("OUT")
    return (Path(out) if out else Path(__file__).resolve().parent / "out") / KEEP_NAME


def preflight_problems() -> list[str]:
    """Every module the check needs that does not import; every carried package that is
    not the project's exact pin; every image package below its floor or below what a
    carried package requires of it. One entry each."""
    import importlib
    from importlib import metadata

    problems = []
    for module, _dist, *_ in (*CARRIED, *IMAGE):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import failure is a missing module
            problems.append(f"{module} missing ({type(exc).__name__}: {exc})")
    try:
        from packaging.requirements import Requirement
        from packaging.version import Version
    except ImportError:
        return problems  # no way to read the pins here: the imports were checked

    def have(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None  # named above, where it matters

    carried = {dist for _, dist in CARRIED}
    image = {dist: floor for _, dist, floor in IMAGE}
    for name, floor in image.items():
        version = have(name)
        if version is not None and Version(version) < Version(floor):
            problems.append(f"{name} {version} (the check needs >= {floor})")
    for requirer in ("shardwise", *sorted(carried - {"shardwise"})):
        for text in (metadata.requires(requirer) if have(requirer) else None) or []:
            req = Requirement(text)
            if req.marker is not None or (requirer == "shardwise") != (req.name in carried):
                continue  # shardwise pins what is carried; the others ask of the image
            if req.name not in carried | set(image):
                continue
            version = have(req.name)
            if version is not None and version not in req.specifier:
                whose = "the project pins" if requirer == "shardwise" else f"{requirer} needs"
                problems.append(f"{req.name} {version} ({whose} {req.specifier})")
    return problems


def preflight_or_exit() -> None:
    """Stop at once in one line (no traceback) when a module the check needs is missing, a
    carried one is not the project's pin, or one of the image's is too old, naming each,
    and the wheels to carry (exit 3)."""
    problems = preflight_problems()
    if not problems:
        return
    print(
        f"gpu-check --quick: {'; '.join(problems)}: carry bench/.gpu-wheels/ (made by "
        "`bench/gpu-check.sh --prepare` where there is network) with the call",
        file=sys.stderr,
    )
    raise SystemExit(3)


def packages() -> dict:
    """The versions the check ran with (the image's and the carried ones), where
    shardwise was imported from, and what a lent image lacks (None: not installed)."""
    import importlib.util
    from importlib import metadata

    out: dict = {}
    for _module, dist, *_ in (*CARRIED, *IMAGE, (None, "snakemake"), (None, "jsonschema")):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    spec = importlib.util.find_spec("shardwise")
    out["shardwise_from"] = spec.origin if spec is not None else None
    return out


def mix_lengths(tokens: int, cap: int = 8192, seed: int = 0):
    """Document lengths of the Dolma-like mix adding up to about ``tokens``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    drawn = np.clip(rng.lognormal(MIX_MU, MIX_SIGMA, size=4 * tokens // 1600 + 8), 16, cap)
    keep = np.searchsorted(np.cumsum(drawn), tokens) + 1
    return drawn[:keep].astype(np.int32)


def prepared_for(engine, lengths, seed: int = 0):
    """A :class:`Prepared` of random ids with these lengths for every classifier's stream."""
    import numpy as np

    from shardwise.classify.engine import Prepared
    from shardwise.classify.tokenization import TokenStream

    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, np.int32)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    vocab = int(engine._classifiers[0].loaded.model.config.vocab_size)
    ids = rng.integers(min(1000, vocab // 2), vocab, int(offsets[-1])).astype(np.int32)
    ids[offsets[:-1]] = 101  # [CLS] first, as the tokenizer puts it
    stream = TokenStream(ids=ids, offsets=offsets, lengths=lengths, pad_id=0)
    keys = {c.key for c in engine._classifiers}
    return Prepared(docs=len(lengths), streams=dict.fromkeys(keys, stream), tokenize_s=0.0)


def timed(engine, prepared) -> tuple[float, object]:
    """Seconds of one ``infer`` (synchronised) and its result."""
    import torch

    cuda = engine.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    result = engine.infer(prepared)
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - started, result


def throughput(check, specs, run_dir, shape: dict) -> dict:
    """Per classifier, mode and shape: tokens/s and MFU; the packed self-check's verdict."""
    import numpy as np
    from synthetic import model_flops

    from shardwise.classify.engine import Engine
    from shardwise.config import InferenceSettings

    tokens, cap = shape["tokens"], shape["max_length"]
    shapes = {"fixed_512": np.full(tokens // 512, 512, np.int32), "mix": mix_lengths(tokens, cap)}
    out: dict = {"shapes": {}}
    for name, lengths in shapes.items():
        weighted = float((lengths.astype(float) ** 2).sum() / lengths.sum())
        out["shapes"][name] = {
            "docs": len(lengths),
            "mean": round(float(lengths.mean())),
            "token_weighted": round(weighted),  # after the cap
            "docs_table_token_weighted": TABLE_TOKEN_WEIGHTED if name == "mix" else 512,
        }
    for spec in specs:
        per: dict = {}
        for mode, (attention, compile_) in VARIANTS.items():
            settings = InferenceSettings(
                attention=attention,
                compile=compile_,
                recheck_margin=0,
                max_length=cap,
                device=shape["device"],
            )
            engine = Engine.load([spec], settings, budget_dir=run_dir / "budgets")
            engine.infer(prepared_for(engine, shapes["mix"][:64]))  # warm-up, probe, self-check
            for kind, lengths in shapes.items():
                seconds, result = timed(engine, prepared_for(engine, lengths))
                flops = model_flops(engine, [lengths.astype(np.int64)])
                per[f"{mode}_{kind}"] = {
                    "tokens_per_s": round(int(lengths.sum()) / seconds),
                    "mfu": round(flops / seconds / PEAK_FLOPS, 4),
                    "seconds": round(seconds, 2),
                    "attention": result.stats["attention"],
                    "compiled": result.stats["compile"],
                    "kernel": result.stats["attention_kernel_packed"]
                    or result.stats["attention_kernel"],
                }
            if attention == "packed":
                per[f"self_check_{mode}"] = result.stats["attention_self_check"]
                check.expect(
                    result.stats["attention"] == "packed",
                    f"{spec.name}: packed fell back ({result.stats['attention_reason']})",
                )
            if compile_ == "on":
                per["compile_s"] = round(engine.compile_s, 2)
                check.expect(
                    result.stats["compile"],
                    f"{spec.name}: compiled fell back ({result.stats['compile_reason']})",
                )
            del engine
        for kind in shapes:
            padded = per[f"padded_{kind}"]["tokens_per_s"]
            for mode in ("packed", "compiled"):
                ratio = per[f"{mode}_{kind}"]["tokens_per_s"] / padded
                per[f"{mode}_over_padded_{kind}"] = round(ratio, 3)
        out[spec.name] = per
    return out


def agreement(check, specs, corpus, device: str) -> dict:
    """bf16 (padded, packed; no re-check) against fp32 labels, per classifier."""
    from shardwise.classify.engine import Engine
    from shardwise.config import InferenceSettings

    logits = {}
    for label, dtype, mode in (
        ("fp32", "float32", "padded"),
        ("bf16_padded", "bfloat16", "padded"),
        ("bf16_packed", "bfloat16", "packed"),
    ):
        settings = InferenceSettings(dtype=dtype, attention=mode, recheck_margin=0, device=device)
        engine = Engine.load(specs, settings)
        logits[label] = engine.infer(engine.prepare(corpus.texts, corpus.urls)).logits
        del engine
    out = {}
    for spec in specs:
        truth = logits["fp32"][spec.name].argmax(1)
        row = {}
        for label in ("bf16_padded", "bf16_packed"):
            row[label] = round(float((logits[label][spec.name].argmax(1) == truth).mean()), 4)
        same = (logits["bf16_packed"][spec.name].argmax(1) == truth).mean()
        check.expect(same >= row["bf16_padded"] - 0.01, f"{spec.name}: packed labels drift")
        out[spec.name] = row
    out["docs"] = len(corpus.texts)
    return out


def startup(models_dir, run_dir, device: str) -> dict:
    """Two shard jobs' start-up, each a fresh process, on one run directory: the first
    with no compile cache at all (cold), the second with the artifact the first kept
    (warm); on the CPU compiled too (``on``), so the rehearsal runs the same path."""
    import startup as bench_startup

    # what a production job runs: compiled on CUDA with Triton
    forward = ("auto", "auto") if device == "cuda" else ("packed", "on")
    jobs = [bench_startup.one_job(models_dir, device, forward, run_dir) for _ in range(2)]
    out = bench_startup.report(jobs, bench_startup.SHARD_SECONDS)
    cold, warm = jobs
    out["compile"] = {
        "cold_s": round(cold["compile_s"], 2),
        "warm_s": round(warm["compile_s"], 2),
        "cold_source": cold["compile_source"],
        "warm_source": warm["compile_source"],
        "cold_kernels": cold["compile_kernels"],  # Inductor's cache hits, misses
        "warm_kernels": warm["compile_kernels"],
    }
    return out


def recheck(check, specs, shape: dict) -> dict:
    """Per classifier, the production forward on half the mix with the fp32 re-check of
    near ties (``recheck_margin: auto``, half precision): tokens/s with it and without it
    (the same run's time less the re-check's: the first pass is the same), and the
    re-check's share of engine time and of tokens."""
    from shardwise.classify.engine import Engine
    from shardwise.config import InferenceSettings

    lengths = mix_lengths(shape["tokens"] // 2, shape["max_length"])
    out: dict = {}
    for spec in specs:
        cpu = shape["device"] == "cpu"  # the production forward there: packed, compiled
        settings = InferenceSettings(
            dtype="bfloat16",
            max_length=shape["max_length"],
            device=shape["device"],
            attention="packed" if cpu else "auto",
            compile="on" if cpu else "auto",
        )
        engine = Engine.load([spec], settings)
        engine.infer(prepared_for(engine, lengths[:64]))  # warm-up, probe, self-check
        seconds, result = timed(engine, prepared_for(engine, lengths, seed=1))
        stats = result.stats
        tokens, plain_s = int(lengths.sum()), seconds - stats["recheck_s"]
        out[spec.name] = {
            "tokens_per_s_with": round(tokens / seconds),
            "tokens_per_s_without": round(tokens / plain_s) if plain_s > 0 else None,
            "recheck_share": round(stats["recheck_share"], 4),
            "recheck_token_share": round(stats["recheck_tokens"] / tokens, 4),
            "rechecked_docs": sum(stats["rechecked_docs"].values()),
            "docs": stats["docs"],
            "calibration_s": round(stats["calibration_s"], 3),
        }
        check.expect(stats["recheck_margin"] == "auto", f"{spec.name}: the re-check is off")
        del engine
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--deadline", type=float, default=None,
        help="wall-clock end (epoch seconds) of the whole check, install included: no "
        "section starts that cannot end by it (default: now + --budget-s)",
    )  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=250, help="without --deadline")
    parser.add_argument("--cpu", action="store_true", help="CI's smoke run: tiny, on the CPU")
    args = parser.parse_args()
    started = time.monotonic()
    end = args.deadline if args.deadline is not None else time.time() + args.budget_s
    if not args.cpu:
        cuda_or_exit()
        preflight_or_exit()
    shape = SHAPES["cpu" if args.cpu else "cuda"] | {"device": "cpu" if args.cpu else "cuda"}
    import tempfile

    from gpu_check import Check, environment
    from synthetic import labelled_corpus, trained_models

    check = Check(cuda=not args.cpu, deadline=started + (end - time.time()), keep=keep_path())
    needs = dict.fromkeys(NEEDS_S, 0.0) if args.cpu else NEEDS_S
    holder: dict = {}
    with tempfile.TemporaryDirectory(prefix="shardwise-gpu-quick-") as tmp:
        run_dir = Path(tmp) / "run"

        def models() -> dict:
            holder["specs"] = trained_models(
                hidden_size=shape["hidden_size"], layers=shape["layers"], heads=shape["heads"],
                vocab_size=shape["vocab_size"], steps=shape["steps"], device=shape["device"],
            )  # fmt: skip
            return {"models": [s.model for s in holder["specs"]], "steps": shape["steps"]}

        check.section(
            "environment",
            lambda: environment(check) | {"packages": packages()},
            needs_s=needs["environment"],
        )
        check.section("models", models, needs_s=needs["models"])
        specs = holder.get("specs")
        if specs:
            corpus = labelled_corpus(shape["docs"], seed=7, median_words=300, max_words=6000)
            device = shape["device"]
            check.section(
                "throughput",
                lambda: throughput(check, specs, run_dir, shape),
                needs_s=needs["throughput"],
            )
            check.section(
                "agreement",
                lambda: agreement(check, specs, corpus, device),
                needs_s=needs["agreement"],
            )
            models_dir = Path(specs[0].model).parent
            check.section(
                "startup",
                lambda: startup(models_dir, Path(tmp) / "startup", device),
                needs_s=needs["startup"],
            )
            check.section(
                "recheck",
                lambda: recheck(check, specs, shape),
                needs_s=needs["recheck"],
            )
    check.summary["elapsed_s"] = round(time.monotonic() - started, 1)
    check.save()
    print(json.dumps(check.result(), indent=1, default=str))
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
