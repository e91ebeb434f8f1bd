"""How close a run's labels are to fp32's, per classifier: the sum over files of each
file's ``fidelity`` (``classify/recheck.py``): documents labelled from fp32, and the
expected labels differing from fp32 among the others (with a 95% bound). Files with a
pinned margin carry no estimate: counted apart, as are pinned margins found too small.
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: The share of labels differing from fp32 a run is for; views flag a run estimated above.
TARGET_RESIDUAL = 0.001


@dataclass(frozen=True, kw_only=True)
class Fidelity:
    """One classifier over a run (or the files checked)."""

    classifier: str
    docs: int
    fp32_docs: int
    residual: float  # expected labels differing from fp32, over files that measured it
    residual_upper: float
    unmeasured_docs: int  # in files with a pinned margin: no estimate
    fallback_files: int  # files the calibration ran wholly in fp32
    too_small_files: int  # files whose pinned margin the measured errors exceeded
    on_cpu_files: int = 0  # files labelled in half precision on a CPU (device auto, no GPU)

    @property
    def fp32_share(self) -> float:
        return self.fp32_docs / self.docs if self.docs else 0.0

    @property
    def residual_share(self) -> float:
        measured = self.docs - self.unmeasured_docs
        return self.residual / measured if measured else 0.0

    @property
    def residual_upper_share(self) -> float:
        measured = self.docs - self.unmeasured_docs
        return self.residual_upper / measured if measured else 0.0

    @property
    def flagged(self) -> bool:
        """Estimated (upper bound) above the target, or a pinned margin found too small."""
        return self.residual_upper_share > TARGET_RESIDUAL or self.too_small_files > 0


def totals(per_file: Iterable[list[dict[str, Any]]]) -> list[Fidelity]:
    """Per classifier, the sums over files' ``fidelity`` entries (first-seen order)."""
    acc: dict[str, dict[str, float]] = {}
    for entries in per_file:
        for e in entries or ():
            name = str(e.get("classifier") or "?")
            keys = ("docs", "fp32", "res", "up", "unmeasured", "fallback", "small", "cpu")
            a = acc.setdefault(name, dict.fromkeys(keys, 0.0))
            docs = _num(e.get("docs"))
            a["docs"] += docs
            a["fp32"] += _num(e.get("fp32_docs"))
            if e.get("residual") is None:
                a["unmeasured"] += docs
            else:
                a["res"] += _num(e.get("residual"))
                a["up"] += _num(e.get("residual_upper"))
            a["fallback"] += e.get("mode") == "float32"
            a["small"] += bool(e.get("margin_too_small"))
            a["cpu"] += e.get("on_cpu") is True
    return [
        Fidelity(
            classifier=name,
            docs=int(a["docs"]),
            fp32_docs=int(a["fp32"]),
            residual=a["res"],
            residual_upper=a["up"],
            unmeasured_docs=int(a["unmeasured"]),
            fallback_files=int(a["fallback"]),
            too_small_files=int(a["small"]),
            on_cpu_files=int(a["cpu"]),
        )
        for name, a in acc.items()
    ]


def _num(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else 0.0
