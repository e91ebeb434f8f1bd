"""Half precision vs fp32 labels, with and without the engine's near-tie re-check, in one run.

One synthetic corpus (two-topic mixes, so real near ties; lognormal lengths with a tail to
max_length), the four WebOrganizer-like classifiers of ``bench/synthetic.py`` (std 0.02 init,
then trained briefly; cached), run by the engine twice on the same device: in fp32 (the
reference) and in a half dtype with the re-check at ``--margin``. Prints, as ratios measured
in this one run:

  * argmax agreement with fp32 without the re-check (the half pass's own labels) and with it;
  * the fraction of labels re-run in fp32 and their share of the tokens;
  * time (half + re-check) / plain half and / fp32, from the engine's own timers;
  * for a range of margins: agreement and fraction re-run (computed from the half pass's logits
    and the fp32 labels), and the smallest margin reaching 99.9% and 100% agreement.

What a CPU can and cannot say: agreement and the fraction re-run depend on the arithmetic
(bf16 rounding is the same IEEE format everywhere; kernels differ in accumulation order), so they
carry over to a GPU roughly. Time does not: without native bf16 (no AVX512-BF16/AMX here) a CPU
runs bf16 several times slower than fp32, so the re-check looks nearly free, while on a GPU fp32
(no tensor cores unless TF32, which is not fp32) is ~10-16x slower per token than bf16. The GPU
cost is therefore estimated as ``token share x GPU fp32/bf16 time ratio`` and printed for a
range of ratios; ``bench/gpu_check.py`` measures it on a GPU.

    python bench/precision.py                  # CPU, hidden 256, 4 layers, max_length 2048
    python bench/precision.py --device cuda --hidden-size 768 --layers 12 --heads 12
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from pathlib import Path

import numpy as np
import torch
from synthetic import label_profile, labelled_corpus, trained_models

from shardwise.classify.calibration import margin_errors
from shardwise.classify.engine import Engine
from shardwise.classify.recheck import AUTO, DEFAULT_RECHECK_MARGIN, top2_margins
from shardwise.config import InferenceSettings

#: fp32 (TF32 off) against bf16 time per token on an H100: 12-14x (docs/engine.md).
GPU_FP32_OVER_HALF = 13
MARGINS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.5, 1.0)


def margin_table(first: dict, reference: dict) -> list[tuple[float, float, float]]:
    """(margin, agreement, fraction re-run) if documents under each margin took fp32's label."""
    margins = np.concatenate([top2_margins(first[n]) for n in first])
    finite = np.concatenate([np.isfinite(first[n]).all(axis=1) for n in first])
    half = np.concatenate([first[n].argmax(axis=1) for n in first])
    ref = np.concatenate([reference[n].argmax(axis=1) for n in first])
    rows = []
    for margin in MARGINS:
        redo = ~finite | (margins < margin)
        agree = np.where(redo, True, half == ref).mean()
        rows.append((margin, float(agree), float(redo.mean())))
    return rows


def smallest_margin(first: dict, reference: dict, target: float) -> float:
    """Smallest margin whose re-check gives ``target`` agreement (exact, from the data)."""
    margins = np.concatenate([top2_margins(first[n]) for n in first])
    wrong = np.concatenate([first[n].argmax(axis=1) != reference[n].argmax(axis=1) for n in first])
    allowed = int(np.floor((1 - target) * len(margins) + 1e-9))
    bad = np.sort(margins[wrong])[::-1]  # the re-check must cover all but `allowed` of these
    if len(bad) <= allowed:
        return 0.0
    return float(np.nextafter(bad[allowed], np.inf))


def all_margin_errors(first: dict, reference: dict) -> np.ndarray:
    """|half margin - fp32 margin| of the half pass's top two labels, every finite label."""
    out = []
    for name, half in first.items():
        ok = np.isfinite(half).all(axis=1)
        out.append(margin_errors(half[ok], reference[name][ok]))
    return np.concatenate(out)


def run_files(engine: Engine, texts: list[str], urls: list[str], per_file: int) -> dict:
    """The corpus through ``engine`` as files of ``per_file`` documents (as one job would):
    logits and first-pass logits concatenated, the engine's timers and counts summed."""
    parts = [engine.infer(engine.prepare(texts[i : i + per_file], urls[i : i + per_file]))
             for i in range(0, len(texts), per_file)]  # fmt: skip
    names = list(parts[0].logits)
    stats = {
        key: sum(p.stats[key] for p in parts)
        for key in ("infer_s", "recheck_s", "calibration_s", "recheck_tokens", "real_tokens")
    }
    for key in ("rechecked_docs", "recheck_changed", "nonfinite_docs"):
        stats[key] = {n: sum(p.stats[key][n] for p in parts) for n in names}
    stats["recheck_max_margin_error"] = {
        n: max(p.stats["recheck_max_margin_error"][n] for p in parts) for n in names
    }
    stats["calibration"] = parts[-1].stats["calibration"]
    return {
        "logits": {n: np.concatenate([p.logits[n] for p in parts]) for n in names},
        "first_pass": {n: np.concatenate([p.first_pass[n] for p in parts]) for n in names},
        "stats": stats,
    }


def jobs_share(args: argparse.Namespace, specs, texts, urls, root: Path) -> dict:
    """The corpus as ``--jobs`` shard jobs (a fresh engine each), twice in this run: each
    job calibrating its own re-check threshold (before), and the later jobs starting
    from the calibration the first recorded in the run directory (after). Per way: the
    re-check's share of engine time and of tokens, the final labels."""
    common = {"max_length": args.max_length, "device": args.device}
    settings = InferenceSettings(dtype=args.dtype, recheck_margin=AUTO, **common)
    per_job = -(-len(texts) // args.jobs)
    out = {}
    for way, budget_dir in (("before", None), ("after", root / "budgets")):
        infer_s = recheck_s = tokens = rechecked = 0.0
        labels: dict[str, list] = {}
        for start in range(0, len(texts), per_job):
            engine = Engine.load(specs, settings, cache_root=root / "c", budget_dir=budget_dir)
            job = run_files(
                engine, texts[start : start + per_job], urls[start : start + per_job],
                args.file_docs,
            )  # fmt: skip
            stats = job["stats"]
            infer_s += stats["infer_s"]
            recheck_s += stats["recheck_s"]
            tokens += stats["real_tokens"]
            rechecked += stats["recheck_tokens"]
            for name, logits in job["logits"].items():
                labels.setdefault(name, []).append(logits.argmax(axis=1))
        out[way] = {
            "recheck_share": recheck_s / infer_s if infer_s else 0.0,
            "token_share": rechecked / max(1.0, tokens),
            "labels": {n: np.concatenate(v) for n, v in labels.items()},
        }
    before, after = out["before"], out["after"]
    same = all((before["labels"][n] == after["labels"][n]).all() for n in before["labels"])
    return {"jobs": args.jobs, "before": before, "after": after, "same_labels": same}


def measure(args: argparse.Namespace, root: Path) -> dict:
    """Build, run fp32 and half, return every figure (also used by gpu_check.py)."""
    corpus = labelled_corpus(
        args.docs,
        seed=args.seed,
        median_words=args.median_words,
        max_words=int(args.max_length * 1.5),
    )
    texts, urls = corpus.texts, corpus.urls
    specs = trained_models(
        hidden_size=args.hidden_size,
        layers=args.layers,
        heads=args.heads,
        device=args.device,
    )
    common = {"max_length": args.max_length, "device": args.device}
    cache = root / "c"
    fp32 = Engine.load(specs, InferenceSettings(dtype="float32", **common), cache_root=cache)
    plain = Engine.load(
        specs, InferenceSettings(dtype=args.dtype, recheck_margin=0.0, **common), cache_root=cache
    )
    half = Engine.load(
        specs,
        InferenceSettings(dtype=args.dtype, recheck_margin=args.margin, **common),
        cache_root=cache,
    )
    for engine in (fp32, plain):  # warm-up (and the CUDA budget probe); not `half`: its
        engine.run(engine.prepare(texts[:16], urls[:16]))  # calibration starts with the job
    reference = run_files(fp32, texts, urls, args.file_docs)
    alone = run_files(plain, texts, urls, args.file_docs)
    checked = run_files(half, texts, urls, args.file_docs)
    names = list(reference["logits"])
    ref_ids = np.concatenate([reference["logits"][n].argmax(axis=1) for n in names])
    first_ids = np.concatenate([checked["first_pass"][n].argmax(axis=1) for n in names])
    final_ids = np.concatenate([checked["logits"][n].argmax(axis=1) for n in names])
    stats = checked["stats"]
    half_s = alone["stats"]["infer_s"]
    return {
        "docs": args.docs,
        "labels": len(ref_ids),
        "dtype": half.dtype_name,
        "device": half.device_name,
        "margin": half.recheck_margin,
        "calibration": stats["calibration"],
        "profile": label_profile(reference["logits"], corpus),
        "agreement_plain": float((first_ids == ref_ids).mean()),
        "agreement_recheck": float((final_ids == ref_ids).mean()),
        "agreement_by_classifier": {
            n: float((checked["logits"][n].argmax(1) == reference["logits"][n].argmax(1)).mean())
            for n in names
        },
        "rechecked": int(sum(stats["rechecked_docs"].values())),
        "fraction_rerun": float(sum(stats["rechecked_docs"].values()) / len(ref_ids)),
        "token_share": stats["recheck_tokens"] / max(1, stats["real_tokens"]),
        "changed": stats["recheck_changed"],
        "max_margin_error": stats["recheck_max_margin_error"],
        "nonfinite": stats["nonfinite_docs"],
        "fp32_s": reference["stats"]["infer_s"],
        "half_s": half_s,
        "half_recheck_s": stats["infer_s"],
        "calibration_s": stats["calibration_s"],
        "ratio_vs_half": stats["infer_s"] / half_s if half_s > 0 else float("nan"),
        "ratio_vs_fp32": stats["infer_s"] / reference["stats"]["infer_s"],
        "table": margin_table(checked["first_pass"], reference["logits"]),
        "margin_999": smallest_margin(checked["first_pass"], reference["logits"], 0.999),
        "margin_error": np.percentile(
            all_margin_errors(checked["first_pass"], reference["logits"]), [50, 99, 99.9, 100]
        ).tolist(),
        "margin_100": smallest_margin(checked["first_pass"], reference["logits"], 1.0),
        "jobs_share": jobs_share(args, specs, texts, urls, root) if args.jobs else None,
    }


def report(r: dict) -> None:
    print(f"labels: {r['profile']}")
    print(
        f"{r['dtype']} vs float32 argmax agreement over {r['labels']} labels "
        f"({r['docs']} docs x 4 classifiers): without re-check {r['agreement_plain']:.4f}, "
        f"with re-check (margin {r['margin']}) {r['agreement_recheck']:.4f}"
    )
    print(
        f"re-run in fp32: {r['rechecked']} labels = {r['fraction_rerun']:.4f} of labels, "
        f"{r['token_share']:.4f} of tokens; labels changed {r['changed']}; non-finite "
        f"{r['nonfinite']}; max margin error {r['max_margin_error']}"
    )
    print(
        "agreement per classifier: "
        + ", ".join(f"{n} {a:.4f}" for n, a in r["agreement_by_classifier"].items())
    )
    for name, cal in (r["calibration"] or {}).items():
        shown = ", ".join(f"<= {t['max_tokens']} tokens: {t['threshold']:.4f}"
                          for t in cal["thresholds"])  # fmt: skip
        print(
            f"calibration {name}: {cal['sample_docs']} docs, max error {cal['max_error']}, "
            f"threshold {shown}, mode {cal['mode']}"
        )
    share = r["calibration_s"] / r["half_recheck_s"] if r["half_recheck_s"] > 0 else 0.0
    print(
        f"time: fp32 {r['fp32_s']:.1f} s, {r['dtype']} {r['half_s']:.1f} s, {r['dtype']} + "
        f"re-check {r['half_recheck_s']:.1f} s -> (half+re-check)/half = "
        f"{r['ratio_vs_half']:.3f}, (half+re-check)/fp32 = {r['ratio_vs_fp32']:.3f}; the "
        f"calibration sample {r['calibration_s']:.1f} s = {share:.1%} of (half+re-check)"
    )
    share = r["token_share"]
    estimates = ", ".join(f"{k}x -> +{share * k:.1%}" for k in (8, 12, 16))
    print(
        "GPU cost estimate (token share x GPU fp32/bf16 time per token; measure it with "
        f"bench/gpu_check.py): {estimates}"
    )
    print("margin  agreement  re-run")
    for margin, agree, rerun in r["table"]:
        print(f"{margin:6.2f}  {agree:9.4f}  {rerun:6.4f}")

    def shown(margin: float) -> str:
        return "any margin > 0 (exact ties)" if 0 < margin < 1e-6 else f"{margin:.4f}"

    print(
        f"smallest margin for >= 99.9% agreement: {shown(r['margin_999'])}; "
        f"for 100%: {shown(r['margin_100'])}"
    )
    jobs = r["jobs_share"]
    if jobs is not None:
        b, a = jobs["before"], jobs["after"]
        gpu = GPU_FP32_OVER_HALF

        def on_gpu(share: float) -> float:  # the re-check's share of GPU time at that ratio
            return share * gpu / (1 - share + share * gpu)

        print(
            f"as {jobs['jobs']} shard jobs: the re-check's share of engine time "
            f"{b['recheck_share']:.1%} each job calibrating (tokens {b['token_share']:.1%}), "
            f"{a['recheck_share']:.1%} from the first job's recorded calibration (tokens "
            f"{a['token_share']:.1%}): after/before "
            f"{a['token_share'] / max(b['token_share'], 1e-12):.3f} of the re-checked tokens; "
            f"on a GPU ({gpu}x fp32/bf16 per token) "
            f"{on_gpu(b['token_share']):.1%} -> {on_gpu(a['token_share']):.1%} of engine time; "
            f"labels {'identical' if jobs['same_labels'] else 'DIFFERENT'}"
        )
    p50, p99, p999, top = r["margin_error"]
    print(
        f"|{r['dtype']} - fp32| of the top-two margin, every label: median {p50:.4f}, "
        f"p99 {p99:.4f}, p99.9 {p999:.4f}, max {top:.4f} (a label can flip only where the "
        "margin is below this)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=200, help="documents in the corpus")
    parser.add_argument("--max-length", type=int, default=2048, help="truncation length")
    parser.add_argument("--median-words", type=float, default=150.0, help="median doc length")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="bfloat16", help="the half dtype to compare")
    parser.add_argument(
        "--margin",
        type=lambda v: v if v == AUTO else float(v),
        default=DEFAULT_RECHECK_MARGIN,
        help="re-check margin: auto (measured per job) or a number",
    )
    parser.add_argument(
        "--file-docs", type=int, default=100, help="documents per file (the job's unit)"
    )
    parser.add_argument(
        "--jobs", type=int, default=4,
        help="shard jobs the corpus is split into for the calibration's share (0: skip)",
    )  # fmt: skip
    parser.add_argument("--hidden-size", type=int, default=256, help="model hidden size")
    parser.add_argument("--layers", type=int, default=4, help="encoder layers")
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"host {platform.node()} cpus={os.cpu_count()} torch_threads={torch.get_num_threads()} "
        f"load={os.getloadavg()[0]:.1f}; hidden {args.hidden_size}, {args.layers} layers, "
        f"{args.heads} heads, max_length {args.max_length}"
    )
    with tempfile.TemporaryDirectory(prefix="shardwise-precision-") as tmp:
        report(measure(args, Path(tmp)))


if __name__ == "__main__":
    main()
