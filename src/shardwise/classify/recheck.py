"""The fp32 re-check of half-precision near ties: which rows, and what it changed.

Where the top two logits are close, half precision can flip a label, which would then
depend on the GPU that ran the shard: rows below the threshold (measured,
``classify/calibration.py``, or pinned) and non-finite rows run again in fp32. The engine
supplies the fp32 pass (docs/engine.md).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from shardwise.classify.calibration import FALLBACK_SHARE, Calibration, margin_errors, spread
from shardwise.run.fidelity import FileFidelity

#: The default: a threshold measured per job and classifier (a number pins one instead).
AUTO = "auto"
DEFAULT_RECHECK_MARGIN = AUTO
#: A pinned margin is too small when a re-check saw a margin error this many times it.
WARN_ERROR_FACTOR = 4


def top2_margins(logits: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 logit per row (``inf`` with fewer than two labels, NaN if not finite)."""
    if logits.ndim != 2 or logits.shape[1] < 2:
        return np.full(len(logits), np.inf, dtype=np.float32)
    top = np.partition(logits, -2, axis=1)
    with np.errstate(invalid="ignore"):  # inf - inf: a non-finite row, NaN on purpose
        return top[:, -1] - top[:, -2]


def rechecks(recheck_margin: float | str, half_precision: bool) -> bool:
    """Whether near ties are re-checked at all (an fp32 copy of each model is needed)."""
    if not half_precision:
        return False
    return recheck_margin == AUTO or float(recheck_margin) > 0


def compare(was: np.ndarray, redo: np.ndarray) -> tuple[int, float]:
    """(labels the fp32 pass changed, largest change of the top-two margin) of re-run rows
    (rows without finite half-precision logits have no margin: left out)."""
    ok = np.isfinite(was).all(axis=1)
    changed = int((was[ok].argmax(axis=1) != redo[ok].argmax(axis=1)).sum())
    errors = margin_errors(was[ok], redo[ok])
    return changed, float(errors.max()) if errors.size else 0.0


@dataclass(kw_only=True)
class Outcome:
    """What the re-check did for one classifier on one file."""

    rechecked: int = 0  # rows labelled from an fp32 pass (sample, near ties, non-finite)
    changed: int = 0  # of those, finite labels the fp32 pass changed
    nonfinite: int = 0  # rows with a non-finite half-precision logit
    max_margin_error: float = 0.0  # largest half-vs-fp32 move of a re-run row's margin
    residual: float | None = None  # expected flips left among half-labelled rows (auto)
    residual_upper: float | None = None  # its 95% upper bound
    too_small: bool = False  # a pinned margin well below the errors measured
    sample_s: float = 0.0  # seconds of the calibration sample's fp32 pass
    #: Set when this file sent the classifier to fp32 for the rest of the job: the share of
    #: its rows under the calibrated threshold (above FALLBACK_SHARE).
    fp32_share: float | None = None


def recheck(
    first: np.ndarray,
    lengths: np.ndarray,
    margin: float | str,
    calibration: Calibration | None,
    run_fp32: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray, Outcome]:
    """Final logits, rows labelled from fp32, and the outcome, for one classifier's pass
    (rows longest first). With ``calibration`` (auto) a sample runs in fp32 first and its
    thresholds decide the near ties, else ``margin`` does; ``run_fp32(positions)`` returns
    fp32 logits of those rows."""
    n = len(first)
    out = Outcome()
    finite = np.isfinite(first).all(axis=1)
    out.nonfinite = int((~finite).sum())
    final = first.copy()
    done = np.zeros(n, bool)
    margins = top2_margins(first)
    if calibration is not None:
        sample = spread(n, calibration.wanted(n))
        if sample.size:
            started = time.perf_counter()
            final[sample] = run_fp32(sample)
            out.sample_s = time.perf_counter() - started
            done[sample] = True
            ok = sample[finite[sample]]
            calibration.add(margin_errors(first[ok], final[ok]), lengths[ok])
        thresholds = calibration.thresholds(lengths)
    else:
        thresholds = np.full(n, float(margin))
    below = finite & (margins < thresholds)
    need = (~finite | below) & ~done
    if need.any():
        positions = np.flatnonzero(need)
        final[positions] = run_fp32(positions)
        done |= need
    out.rechecked = int(done.sum())
    if done.any():
        out.changed, out.max_margin_error = compare(first[done], final[done])
    if calibration is None:
        pinned = float(margin)
        out.too_small = pinned > 0 and out.max_margin_error > WARN_ERROR_FACTOR * pinned
        return final, done, out
    out.residual, out.residual_upper = calibration.residual(margins[~done])
    calibration.files += 1
    if n and below.mean() > FALLBACK_SHARE:
        calibration.fp32 = True  # from the next file on: half precision buys nothing here
        out.fp32_share = float(below.mean())
    return final, done, out


def fidelity(
    name: str, docs: int, mode: str, outcome: Outcome, *, on_cpu: bool = False
) -> FileFidelity:
    """One classifier's fidelity to fp32 on one file (the stats' ``fidelity`` entries;
    the fields are :class:`~shardwise.run.fidelity.FileFidelity`'s): the fp32 modes are
    exact, a pinned margin measures nothing."""
    exact = mode in ("float32", "fp32")
    return FileFidelity(
        classifier=name,
        docs=docs,
        fp32_docs=docs if mode == "fp32" else outcome.rechecked,
        mode=mode,
        residual=0.0 if exact else outcome.residual,
        residual_upper=0.0 if exact else outcome.residual_upper,
        margin_too_small=outcome.too_small,
        on_cpu=on_cpu and mode != "fp32",
    )
