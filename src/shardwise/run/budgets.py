"""``<run_dir>/budgets/<key>.json``: the batch budget a kind of GPU was probed to hold.

Every shard job on CUDA used to probe its padded-token budget with two or three forwards
of 64 x 8,192 tokens: about 4-6% of a campaign's GPU time at 25,000 shards. What fits
depends on the GPU (its name and memory), the dtype, the models loaded and the longest
input, not on the shard, so the first job on a kind of GPU records the answer and later
ones read it. Another GPU, model set-up, dtype or torch is another key, so it is probed
again; a damaged record is ignored (and rewritten by the next probe).
"""

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Self

from shardwise.errors import RecordError
from shardwise.run.record import Fields
from shardwise.store.atomic import write_atomic

DIRECTORY = "budgets"


@dataclass(frozen=True, kw_only=True)
class BudgetKey:
    """What decides how many tokens fit in one batch."""

    gpu: str  # the device name, as torch reports it
    memory: int  # its total memory in bytes
    dtype: str
    torch: str  # torch's version (kernels and their memory change with it)
    max_length: int
    models: tuple[int, ...]  # the parameter count of each model copy loaded on the GPU

    def name(self) -> str:
        """The record's file name: a hash of every field."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16] + ".json"


class _KeyedRecord:
    """A record of one :class:`BudgetKey` (its JSON, written and read one way)."""

    def to_json(self) -> str:
        """The record's text."""
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_json(cls, raw: str, where: str) -> Self:
        """The record; RecordError when a field is absent or of the wrong type."""
        fields = Fields.parse(raw, where)
        return fields.into(cls, key=fields.sub("key").into(BudgetKey))


@dataclass(frozen=True, kw_only=True)
class Budget(_KeyedRecord):
    """One probe's answer for one :class:`BudgetKey`."""

    key: BudgetKey
    tokens: int  # the padded-token budget
    kernel: str  # the attention kernel the probe's masked batches used
    probe_s: float  # what the probe cost (what a later job saves)


def cached(
    directory: Path | None, key: BudgetKey, probe: Callable[[], tuple[int, str, float]]
) -> tuple[Budget, bool]:
    """The budget for ``key``: read from ``directory`` when a job recorded it, else
    ``probe()`` (tokens, kernel, seconds) and recorded; True when it was read."""
    target = None if directory is None else Path(directory) / key.name()
    if target is not None:
        try:
            budget = Budget.from_json(target.read_text("utf-8"), str(target))
            if budget.key == key and budget.tokens > 0:
                return budget, True
        except (OSError, UnicodeDecodeError, RecordError):
            pass  # none yet, or damaged: probe and write it again
    tokens, kernel, seconds = probe()
    budget = Budget(key=key, tokens=tokens, kernel=kernel, probe_s=seconds)
    if target is not None:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, budget.to_json().encode())
        except OSError:
            pass  # a read-only run directory: the next job probes again, nothing is lost
    return budget, False


@dataclass(frozen=True, kw_only=True)
class Verdict(_KeyedRecord):
    """``<kind>-<key>.json``: why ``auto`` does without a faster forward on one kind of
    GPU: ``attention`` (padded batches: a packed self-check that failed, a kernel the GPU
    or torch lacks) or ``compile`` (the eager packed forward: the compiled one failed its
    self-check), so later jobs decide at once instead of repeating it, and say nothing new."""

    key: BudgetKey
    reason: str
    at: str


#: What a :class:`Verdict` decides.
VERDICTS = ("attention", "compile")


def verdict_path(directory: Path, key: BudgetKey, kind: str) -> Path:
    """Where the ``kind`` verdict of ``key`` lies."""
    if kind not in VERDICTS:
        raise ValueError(f"verdict kind {kind!r}: expected one of {list(VERDICTS)}")
    return Path(directory) / f"{kind}-{key.name()}"


def verdict(directory: Path | None, key: BudgetKey, kind: str) -> Verdict | None:
    """The ``kind`` verdict an earlier job recorded for ``key``; None (none, or damaged)."""
    if directory is None:
        return None
    target = verdict_path(directory, key, kind)
    try:
        found = Verdict.from_json(target.read_text("utf-8"), str(target))
    except (OSError, UnicodeDecodeError, RecordError):
        return None
    return found if found.key == key else None


def record_verdict(
    directory: Path | None, key: BudgetKey, kind: str, reason: str, at: str
) -> Path | None:
    """Record the ``kind`` verdict of ``key`` and why; where (None: nowhere to write)."""
    if directory is None:
        return None
    target = verdict_path(directory, key, kind)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, Verdict(key=key, reason=reason, at=at).to_json().encode())
    except OSError:
        return None  # a read-only run directory: the next job decides again
    return target


@dataclass(frozen=True, kw_only=True)
class CalibrationKey:
    """What a classifier's re-check calibration depends on: the classifier and its model,
    where and how it runs (device name, dtype, torch) and the longest input."""

    classifier: str
    model: str
    device: str
    dtype: str
    torch: str
    max_length: int

    def name(self) -> str:
        """The record's file name: ``calibration-`` and a hash of every field."""
        text = json.dumps(asdict(self), sort_keys=True)
        return "calibration-" + hashlib.sha256(text.encode()).hexdigest()[:16] + ".json"


@dataclass(frozen=True, kw_only=True)
class CalibrationRecord:
    """``calibration-<key>.json``: the margin errors (half precision against fp32) the
    jobs of a set-up measured, and the input lengths they were measured at
    (``classify/calibration.py``). Each job starts from it and samples only what is
    missing (nothing once it holds the full sample): the sample's fp32 pass is most of
    the re-check's cost where jobs are short."""

    key: CalibrationKey
    errors: tuple[float, ...]
    lengths: tuple[int, ...]
    at: str

    def to_json(self) -> str:
        """The record's text."""
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_json(cls, raw: str, where: str) -> Self:
        """The record; RecordError when a field is absent or of the wrong type."""
        fields = Fields.parse(raw, where)
        record = fields.into(cls, key=fields.sub("key").into(CalibrationKey))
        if len(record.errors) != len(record.lengths) or not record.errors:
            raise fields.refuse("errors", "one error per length, at least one")
        return record


def calibration(directory: Path | None, key: CalibrationKey) -> CalibrationRecord | None:
    """The calibration an earlier job recorded for ``key``; None (none, or damaged)."""
    if directory is None:
        return None
    target = Path(directory) / key.name()
    try:
        found = CalibrationRecord.from_json(target.read_text("utf-8"), str(target))
    except (OSError, UnicodeDecodeError, RecordError):
        return None
    return found if found.key == key else None


def record_calibration(directory: Path | None, record: CalibrationRecord) -> None:
    """Keep a calibration for later jobs, unless the run directory already holds one at
    least as large (a wave of jobs measures at once: any of them serves; a race loses a
    few samples, never a record). A read-only run directory: the next job calibrates
    again, nothing is lost."""
    if directory is None:
        return
    held = calibration(directory, record.key)
    if held is not None and len(held.errors) >= len(record.errors):
        return
    target = Path(directory) / record.key.name()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, record.to_json().encode())
    except OSError:
        return
