"""The fp32 re-check of half-precision near ties: which rows, and what it changed.

Half precision moves a classifier's logits a little; where the top two are close,
that can flip the label, so a label would depend on the GPU generation that ran the
shard. The engine runs the rows whose top-two margin is below the re-check margin
(and any row with a non-finite logit) again in fp32; this module holds the pure
arithmetic of that decision and of its outcome (see docs/engine.md).
"""

from __future__ import annotations

import numpy as np

#: Default top-two logit margin under which a half-precision label is re-checked in fp32; chosen
#: by ``bench/precision.py`` (docs/engine.md has the measurement).
DEFAULT_RECHECK_MARGIN = 0.01
#: Warn once per job when a re-check saw a margin error this many times the margin (at the
#: default margin the benchmark models' largest errors are 1-3x it).
WARN_ERROR_FACTOR = 4


def top2_margins(logits: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 logit per row (``inf`` with fewer than two labels, NaN if not finite)."""
    if logits.ndim != 2 or logits.shape[1] < 2:
        return np.full(len(logits), np.inf, dtype=np.float32)
    top = np.partition(logits, -2, axis=1)
    return top[:, -1] - top[:, -2]


def effective_margin(recheck_margin: float, half_precision: bool) -> float:
    """The re-check margin in force: 0 when the compute dtype is already fp32."""
    return float(recheck_margin) if half_precision else 0.0


def rows_to_recheck(first: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """(rows to run again in fp32, rows whose logits are all finite) of ``first``."""
    finite = np.isfinite(first).all(axis=1)
    need = ~finite
    if margin > 0:
        need |= top2_margins(first) < margin
    return need, finite


def compare(was: np.ndarray, redo: np.ndarray) -> tuple[int, float]:
    """(labels the fp32 pass changed, largest change of the top-two margin) of re-run rows.

    Rows whose half-precision logits were not finite are left out: they have no margin.
    """
    ok = np.isfinite(was).all(axis=1)
    changed = int((was[ok].argmax(axis=1) != redo[ok].argmax(axis=1)).sum())
    error = 0.0
    if ok.any() and was.shape[1] >= 2:
        top = np.argsort(was[ok], axis=1)[:, -2:]
        rows = np.arange(len(top))
        before = was[ok][rows, top[:, 1]] - was[ok][rows, top[:, 0]]
        after = redo[ok][rows, top[:, 1]] - redo[ok][rows, top[:, 0]]
        error = float(np.abs(before - after).max())
    return changed, error
