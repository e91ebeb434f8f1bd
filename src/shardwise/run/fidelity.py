"""How close a run's labels are to fp32's, per classifier: the sum over files of each
file's ``fidelity`` (``classify/recheck.py``): documents labelled from fp32, and the
expected labels differing from fp32 among the others (with a 95% bound). Files with a
pinned margin carry no estimate: counted apart, as are pinned margins found too small.
"""

import dataclasses
import math
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self

import pyarrow as pa

from shardwise.run.record import Fields

#: The share of labels differing from fp32 a run is for; views flag a run estimated above.
TARGET_RESIDUAL = 0.001


@dataclass(frozen=True, kw_only=True)
class FileFidelity:
    """One classifier's fidelity to fp32 on one file: an entry of the stats' ``fidelity``
    (made by ``classify/recheck.py``). ``mode``: ``recheck`` (calibrated), ``float32``
    (sent to fp32), ``fp32`` (the dtype), ``pinned``; ``residual``: the expected labels
    differing from fp32 among the documents not re-checked (None when pinned: nothing
    measured it), ``residual_upper`` its 95% bound; ``on_cpu``: the half precision ran on
    a CPU (device ``auto`` found no GPU)."""

    classifier: str
    docs: int
    fp32_docs: int = 0  # defaults: absent in the stats of older versions
    mode: str = ""
    residual: float | None = None
    residual_upper: float | None = None
    margin_too_small: bool = False
    on_cpu: bool = False

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> Self:
        """An entry as a stats file holds it, every field checked."""
        return Fields(data, where).into(cls)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Self:
        """An entry as the bulk reader gives it (numbers as float64, absent ones null): the
        figures of files read without their checks count as 0, never raise."""
        residual, upper = row.get("residual"), row.get("residual_upper")
        return cls(
            classifier=str(row.get("classifier") or "?"),
            docs=int(_num(row.get("docs"))),
            fp32_docs=int(_num(row.get("fp32_docs"))),
            mode=str(row.get("mode") or ""),
            residual=None if residual is None else _num(residual),
            residual_upper=None if upper is None else _num(upper),
            margin_too_small=bool(row.get("margin_too_small")),
            on_cpu=row.get("on_cpu") is True,
        )


#: The bulk reader's type of each field, by its annotation (ints as float64, as JSON reads).
_ARROW_OF = {str: pa.string(), int: pa.float64(), float: pa.float64(), bool: pa.bool_()}
#: The type of one entry as the bulk reader reads it, derived from :class:`FileFidelity`.
ARROW = pa.struct(
    [
        (name, _ARROW_OF[next(t for t in typing.get_args(hint) or (hint,) if t is not type(None))])
        for name, hint in typing.get_type_hints(FileFidelity).items()
    ]
)


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


def totals(per_file: Iterable[Iterable[FileFidelity] | None]) -> list[Fidelity]:
    """Per classifier, the sums over files' ``fidelity`` entries (first-seen order)."""
    acc: dict[str, dict[str, float]] = {}
    keys = ("docs", "fp32", "res", "up", "unmeasured", "fallback", "small", "cpu")
    for entries in per_file:
        for e in entries or ():
            a = acc.setdefault(e.classifier, dict.fromkeys(keys, 0.0))
            a["docs"] += e.docs
            a["fp32"] += e.fp32_docs
            if e.residual is None:
                a["unmeasured"] += e.docs
            else:
                a["res"] += e.residual
                a["up"] += e.residual_upper or 0.0
            a["fallback"] += e.mode == "float32"
            a["small"] += e.margin_too_small
            a["cpu"] += e.on_cpu
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


def rows(entries: Iterable[Mapping[str, Any]] | None) -> list[FileFidelity]:
    """One file's entries as the bulk reader gives them, as records."""
    return [FileFidelity.from_row(e) for e in entries or ()]


def _num(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else 0.0
