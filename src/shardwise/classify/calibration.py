"""The re-check threshold, measured per job and classifier (``recheck_margin: auto``).

A sample spread over the lengths runs in both precisions; the threshold is ``SAFETY`` x
the largest margin error per length bucket, and what is left is estimated (errors taken
as exponential, a heavier tail than rounding's). A classifier that would send more than
``FALLBACK_SHARE`` of a file to fp32 runs in fp32 for the rest of the job. docs/engine.md.
"""

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise.run import budgets

#: Calibration documents per classifier and job; the error's largest values settle by then.
SAMPLE_DOCS = 256
#: The first file may give this many at once (a job needs a threshold from its start) ...
FIRST_FILE_DOCS = 64
#: ... later files at most this share of theirs, so the sample's cost stays small.
FILE_SHARE = 0.10
#: Threshold = SAFETY x the largest margin error measured (per length bucket).
SAFETY = 2.0
#: Length buckets need this many calibration documents each, else one threshold for all.
BUCKET_DOCS = 64
#: Above this share of documents re-checked, the classifier runs in fp32 for the job.
FALLBACK_SHARE = 0.25


def spread(n: int, k: int) -> np.ndarray:
    """``k`` of ``n`` positions evenly spaced, first to last (rows sorted by length)."""
    if k <= 0 or n <= 0:
        return np.zeros(0, np.int64)
    if k >= n:
        return np.arange(n, dtype=np.int64)
    return np.unique(np.round(np.linspace(0, n - 1, k)).astype(np.int64))


def margin_errors(half: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Per row, how far half precision moved the top-two margin (the half pass's top two)."""
    if half.shape[1] < 2 or not len(half):
        return np.zeros(len(half), np.float64)
    top = np.argsort(half, axis=1)[:, -2:]
    rows = np.arange(len(top))
    before = half[rows, top[:, 1]] - half[rows, top[:, 0]]
    after = full[rows, top[:, 1]] - full[rows, top[:, 0]]
    out = np.abs(before.astype(np.float64) - after.astype(np.float64))
    return np.where(np.isfinite(out), out, 0.0)


def _chi2_lower_5pct(dof: int) -> float:
    """The 5% quantile of chi-square with ``dof`` degrees of freedom (Wilson-Hilferty;
    within 0.1% of the exact value for the sample sizes here)."""
    z = -1.6448536269514722  # the standard normal's 5% quantile
    k = float(dof)
    return k * (1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k))) ** 3


@dataclass
class Calibration:
    """One classifier's margin errors measured so far in this job, and what follows."""

    errors: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    fp32: bool = False  # fell back: the classifier runs in fp32 for the rest of the job
    files: int = 0
    #: How many of ``errors`` came from earlier jobs' record (``run/budgets.py``), and how
    #: many the run directory's record holds now (what this job last kept).
    recorded: int = 0
    kept: int = 0

    @classmethod
    def of_record(cls, record: "budgets.CalibrationRecord") -> "Calibration":
        """Earlier jobs' sample: this job samples only what is missing (none once full)."""
        errors, lengths = list(record.errors), list(record.lengths)
        return cls(errors=errors, lengths=lengths, recorded=len(errors), kept=len(errors))

    @property
    def grown(self) -> bool:
        """Whether this job's sample holds more than the run directory's record."""
        return len(self.errors) > self.kept

    def record(self, key: "budgets.CalibrationKey", at: str) -> "budgets.CalibrationRecord":
        """The finished sample as the run directory keeps it."""
        return budgets.CalibrationRecord(
            key=key, errors=tuple(self.errors), lengths=tuple(self.lengths), at=at
        )

    def wanted(self, docs: int) -> int:
        """How many of a file's ``docs`` to add to the sample."""
        left = SAMPLE_DOCS - len(self.errors)
        if left <= 0 or docs <= 0:
            return 0
        cap = FIRST_FILE_DOCS if not self.errors else max(1, math.ceil(FILE_SHARE * docs))
        return min(left, cap, docs)

    def add(self, errors: np.ndarray, lengths: np.ndarray) -> None:
        """Record measured margin errors and the input lengths they were measured at."""
        self.errors += [float(e) for e in errors]
        self.lengths += [int(n) for n in lengths]

    def buckets(self) -> list[tuple[int, float]]:
        """(up to this many tokens, threshold), shortest first: errors grow with length, so
        a large enough sample is split at its median length (the longer bucket's threshold
        never below the shorter's)."""
        if not self.errors:
            return []
        err, lens = np.asarray(self.errors), np.asarray(self.lengths)
        if len(err) >= 2 * BUCKET_DOCS:
            cut = int(np.median(lens))
            short, long = err[lens <= cut], err[lens > cut]
            if len(short) >= BUCKET_DOCS and len(long) >= BUCKET_DOCS:
                low = SAFETY * float(short.max())
                return [(cut, low), (2**31 - 1, max(low, SAFETY * float(long.max())))]
        return [(2**31 - 1, SAFETY * float(err.max()))]

    def thresholds(self, lengths: np.ndarray) -> np.ndarray:
        """The threshold for each document, by its input length."""
        out = np.zeros(len(lengths), np.float64)
        for upto, threshold in reversed(self.buckets()):
            out[lengths <= upto] = threshold
        return out

    def residual(self, margins: np.ndarray) -> tuple[float, float]:
        """Expected flips, and their 95% upper bound, among documents labelled from the
        half pass with these ``margins`` (all above their thresholds)."""
        if not self.errors or not len(margins):
            return 0.0, 0.0
        n = len(self.errors)
        beta = max(float(np.mean(self.errors)), 1e-12)
        upper = beta * 2 * n / _chi2_lower_5pct(2 * n)  # the mean's 95% upper limit
        m = np.where(np.isfinite(margins), margins, np.inf)
        return float(np.exp(-m / beta).sum()), float(np.exp(-m / upper).sum())

    def summary(self) -> dict[str, Any]:
        """What each file's stats record of the calibration (as it stands)."""
        thresholds = [{"max_tokens": upto, "threshold": round(t, 6)} for upto, t in self.buckets()]
        return {
            "sample_docs": len(self.errors),
            "safety": SAFETY,
            "thresholds": thresholds,
            "max_error": round(max(self.errors), 6) if self.errors else None,
            "mean_error": round(float(np.mean(self.errors)), 6) if self.errors else None,
            "mode": "float32" if self.fp32 else "recheck",
            "recorded": self.recorded,  # documents of the sample earlier jobs measured
        }
