"""The engine's own figures of one file (the stats' ``engine``), as one record.

Recorded as the engine measured them and never decided on: each field is read checked,
and may be absent (stats of older versions). Every key is described in docs/engine.md.
"""

from dataclasses import dataclass
from typing import Any, Self

from shardwise.run.fidelity import FileFidelity
from shardwise.run.record import Fields


@dataclass(frozen=True)
class Threshold:
    """One bucket of a calibration: documents up to ``max_tokens`` use ``threshold``."""

    max_tokens: int
    threshold: float


@dataclass(frozen=True)
class CalibrationFigures:
    """A classifier's re-check calibration as it stood (``classify/calibration.py``)."""

    sample_docs: int = 0
    safety: float | None = None
    thresholds: tuple[Threshold, ...] = ()
    max_error: float | None = None
    mean_error: float | None = None
    mode: str | None = None  # recheck | float32
    recorded: int | None = None  # documents of the sample earlier jobs measured (run/budgets.py)


@dataclass(frozen=True)
class SelfCheck:
    """The packed forward's self-check of one classifier (``classify/attention.py``)."""

    classifier: str
    docs: int = 0
    max_prob_diff: float = 0.0
    label_diffs: int = 0
    passed: bool = False
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class EngineFigures:
    """The engine's figures of one file: its work (tokens, padding, batches), its time
    (tokenizing, inference, the fp32 re-check, the budget probe), the attention it ran and
    the re-check's findings per classifier (docs/engine.md)."""

    docs: int | None = None
    tokens: int | None = None
    real_tokens: int | None = None
    padded_tokens: int | None = None
    pad_efficiency: float | None = None
    truncated_docs: int | None = None
    tokenize_s: float | None = None
    infer_s: float | None = None
    infer_tokens_per_s: float | None = None
    batch_budget: float | None = None
    batch_mode: int | None = None  # 1: a fixed batch size; 0: a token budget
    batch_cost: float | None = None  # tokens' worth of fixed per-batch work (a budget)
    oom_retries: int | None = None
    batches: int | None = None
    probe_s: float | None = None
    budget_cached: bool | None = None
    attention_kernel: str | None = None
    attention_kernel_unmasked: str | None = None
    attention: str | None = None
    attention_reason: str | None = None
    attention_kernel_packed: str | None = None
    attention_self_check: tuple[SelfCheck, ...] = ()
    compile: bool | None = None
    compile_reason: str | None = None
    compile_s: float | None = None  # the first compiled call, compiling included
    compile_cache: str | None = None  # where Inductor keeps the compiled kernels
    compile_source: str | None = None  # artifact | compiled | operator (classify/compiling.py)
    compile_artifact: str | None = None  # the run directory's artifact read or kept
    compile_kernels_hit: int | None = None  # Inductor's cache hits in the first call
    compile_kernels_missed: int | None = None  # ... and misses: graphs compiled then
    compile_graphs: int | None = None  # graphs compiled so far in the job (recompiles too)
    fp32_matmul_ok: bool | None = None
    recheck_margin: float | str | None = None
    rechecked_docs: dict[str, int] | None = None
    recheck_changed: dict[str, int] | None = None
    nonfinite_docs: dict[str, int] | None = None
    recheck_max_margin_error: dict[str, float] | None = None
    calibration: dict[str, CalibrationFigures] | None = None
    calibration_s: float | None = None
    fidelity: tuple[FileFidelity, ...] = ()
    recheck_tokens: int | None = None
    recheck_batches: int | None = None
    recheck_s: float | None = None
    recheck_share: float | None = None  # recheck_s / infer_s: the fp32 re-check's share
    tokenize_fallback_docs: int | None = None
    tokenize_verified_docs: int | None = None
    distinct_tokenizers: int | None = None

    @classmethod
    def from_json(cls, data: Any, where: str) -> Self:
        """The figures as the engine gives them or a stats file records them."""
        return Fields.of(data, where).into(cls)
