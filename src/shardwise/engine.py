"""The classification engine: load classifiers once, ``prepare()`` (CPU) then ``run()`` (device).

Why it is shaped like this (see issues 3 and 13, and docs/ARCHITECTURE.md):

* ``prepare`` only tokenizes (shared across classifiers, :mod:`shardwise.tokenization`) and never
  touches torch or the device, so the job can prepare file N+1 on a reader thread while ``run``
  computes file N.
* ``run`` sorts a whole file by token length (longest first), cuts batches under a padded-token
  budget at the least padding plus per-batch cost (:func:`shardwise.batching.plan_min_padding`),
  runs every classifier that shares an id stream on the same collated batch, and scatters results
  back to input order. Logits stay on the device until a classifier's whole pass is done: one
  host synchronisation per classifier and pass, never one per batch.
* The budget on CUDA is probed once per engine (= per job) at the longest length with an
  attention mask (padded batches carry one, which decides the attention kernel), halved on OOM
  with the failing batch retried (never dropped), and the working value is kept.
* dtype: bf16 on compute capability >= 8.0, fp16 below, fp32 on CPU, unless configured; bf16 is
  refused below 8.0 (no bf16 tensor cores there).
* Near-tie re-check: half precision changes the argmax of documents whose top two logits are
  close (measured: 4-5% of documents flip with bf16 on a synthetic checkpoint), so a label would
  depend on the GPU generation that picked up the shard. After the half-precision pass, documents
  whose top-two logit margin is below ``recheck_margin`` (and any row with a non-finite logit)
  are run again in fp32 on the same device, in their own token-budget batches, and their label,
  label id, score and probabilities come from that pass. The fp32 weights are a second resident
  copy of each model (loaded from the checkpoint, not upcast from the half copy: upcast half
  weights are a different model, see docs/engine.md).

This module (with :mod:`shardwise.models` and :mod:`shardwise.tinymodels`) is the only torch
importer in shardwise.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch.overrides import TorchFunctionMode

from shardwise.batching import BatchPolicy, CannotShrinkError
from shardwise.errors import DeviceError, ModelError
from shardwise.models import LoadedClassifier, load_classifier
from shardwise.tokenization import (
    INPUT_KINDS,
    SharedTokenizer,
    StreamKey,
    TokenizerInfo,
    TokenStream,
)

__all__ = [
    "CPU_BATCH_COST",
    "CPU_BATCH_TOKENS",
    "DEFAULT_RECHECK_MARGIN",
    "GPU_ENV_VARS",
    "ClassifierSpec",
    "Engine",
    "Inference",
    "InferenceSettings",
    "Labels",
    "Prepared",
    "gpus_assigned",
    "probe_rows",
    "select_device",
    "select_dtype",
    "top2_margins",
]

log = logging.getLogger("shardwise.engine")

#: Padded-token budget on CPU: big enough to amortise per-batch overhead, small enough to stay in
#: cache-friendly territory (measured: sorted 16k-token batches beat sorted fixed-32 batches).
CPU_BATCH_TOKENS = 16384
#: Per-batch cost (in tokens) the CPU batch planner weighs against padding; measured with
#: ``bench/classify.py`` at the tiny and the proxy shape (see docs/engine.md).
CPU_BATCH_COST = 128
#: On CUDA the per-batch cost is the budget divided by this: a batch must save that share of a
#: full batch in padding to be worth a forward of its own (launch overhead, an under-filled GPU).
CUDA_BATCH_COST_DIVISOR = 64
#: Upper bound of the CUDA probe: beyond this a bigger batch does not run faster.
CUDA_MAX_BATCH_TOKENS = 1 << 19
#: Fraction of free GPU memory the first probe candidate is sized for.
_PROBE_MEMORY_FRACTION = 0.6
#: Default top-two logit margin under which a half-precision label is re-checked in fp32; chosen
#: by ``bench/precision.py`` (docs/engine.md has the measurement).
DEFAULT_RECHECK_MARGIN = 0.01
#: Warn once per job when a re-check saw a margin error this many times the margin (at the
#: default margin the benchmark models' largest errors are 1-3x it).
_WARN_ERROR_FACTOR = 4
#: Environment variables through which a scheduler hands a job its GPUs.
GPU_ENV_VARS = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS")
#: Values of those variables that mean "no GPU".
_NO_GPU_VALUES = {"", "none", "nodevfiles", "void", "n/a"}

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}

#: Called before every forward with ``(rows, padded_tokens)``; may raise to simulate faults.
ForwardHook = Callable[[int, int], None]


@dataclass(frozen=True)
class ClassifierSpec:
    """One classifier: output column prefix, hub id or local directory, and its input format."""

    name: str
    model: str  # hub id or local directory
    input: str  # "url_text" -> "{url}\n\n{text}", "text" -> "{text}"


@dataclass(frozen=True)
class InferenceSettings:
    """How to run the classifiers; defaults are the production settings."""

    max_length: int = 8192
    dtype: str = "auto"  # auto|float32|bfloat16|float16
    batch_size: int | None = None  # fixed rows per batch (overrides the token budget)
    batch_tokens: int | None = None  # padded-token budget; None -> probe on CUDA, 16384 on CPU
    device: str = "auto"  # auto|cpu|cuda|cuda:N
    probs: bool = False  # also write <name>_probs (list<float16>)
    recheck_margin: float = DEFAULT_RECHECK_MARGIN  # 0: no fp32 re-check of half-precision ties


@dataclass
class Labels:
    """Output columns (input order) and engine stats for one ``run``.

    ``stats`` (written as ``engine`` in each file's ``.stats.json``):

    * ``docs``; ``tokens`` = ``real_tokens``: real (unpadded) input tokens of the main pass,
      counted once per classifier that reads them (four classifiers reading a 500-token
      document count 2,000); ``padded_tokens`` the same with padding; ``pad_efficiency`` their
      ratio; ``truncated_docs``: documents whose input was cut at ``max_length`` in any stream
      (counted once per document).
    * ``infer_s``: seconds ``run`` took (every pass and re-check, no tokenization);
      ``tokens_per_s`` = ``real_tokens / infer_s``; ``tokenize_s``: the ``prepare`` call's time.
    * batching: ``batch_budget`` (tokens, or rows when ``batch_mode`` is 1), ``batch_cost``,
      ``batches``, ``oom_retries`` (cumulative per job), ``probe_s``; ``attention_kernel`` /
      ``attention_kernel_unmasked``: the scaled-dot-product kernel padded / unpadded batches use.
    * re-check: ``recheck_margin``; per classifier ``rechecked_docs`` (re-run in fp32),
      ``recheck_changed`` (finite labels the re-check changed), ``nonfinite_docs`` (rows with a
      NaN/inf logit, always re-run) and ``recheck_max_margin_error`` (largest difference of the
      top-two margin between the two passes among re-checked documents: if it nears the margin,
      the margin is too small); ``recheck_tokens``, ``recheck_batches``, ``recheck_s``.
    * tokenization: ``tokenize_fallback_docs``, ``tokenize_verified_docs``,
      ``distinct_tokenizers``.
    """

    columns: dict[str, pa.Array]
    stats: dict[str, Any]


@dataclass
class Prepared:
    """Tokenized documents, ready for :meth:`Engine.run`. Holds no torch objects."""

    docs: int
    streams: dict[StreamKey, TokenStream]
    tokenize_s: float
    fallback_docs: int = 0
    verified_docs: int = 0
    truncated_docs: int = 0


@dataclass
class _Classifier:
    spec: ClassifierSpec
    loaded: LoadedClassifier
    key: StreamKey
    key_mask_4d: bool  # the model accepts a ready 4D additive mask (native GTE does)


@dataclass
class _Pass:
    """Work counters of one or more batch passes."""

    batches: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0

    def add(self, other: _Pass) -> None:
        self.batches += other.batches
        self.real_tokens += other.real_tokens
        self.padded_tokens += other.padded_tokens


@dataclass
class _Recheck:
    """What the fp32 re-check did for one classifier in one ``run``."""

    rechecked: int = 0
    changed: int = 0
    nonfinite: int = 0
    max_margin_error: float = 0.0
    work: _Pass = field(default_factory=_Pass)


@dataclass
class Inference:
    """Logits of one ``run`` (input order) before and after the re-check, plus stats."""

    logits: dict[str, np.ndarray]  # final (after the re-check)
    first_pass: dict[str, np.ndarray]  # the compute dtype's own logits
    rechecked: dict[str, np.ndarray]  # bool per document: re-run in fp32
    stats: dict[str, Any]


def _names_gpus(value: str) -> bool:
    """True when a device-list variable's value names at least one GPU (not "", -1, NoDevFiles)."""
    entries = [v.strip() for v in value.split(",")]
    return any(v.lower() not in _NO_GPU_VALUES and not v.startswith("-") for v in entries)


def gpus_assigned(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The GPU variables (:data:`GPU_ENV_VARS`) that say this process was given GPUs."""
    env = os.environ if environ is None else environ
    return {
        name: env[name]
        for name in GPU_ENV_VARS
        if name in env and env[name].strip() and _names_gpus(env[name])
    }


def _no_cuda_reason() -> str:
    """Why torch cannot use CUDA here, naming ``torch.version.cuda``."""
    built = torch.version.cuda
    if built is None:
        return (
            f"torch {torch.__version__} is a CPU-only build (torch.version.cuda=None); install a "
            "CUDA build of torch in the job's environment (README: 'A CUDA build of torch')"
        )
    return (
        f"torch {torch.__version__} was built for CUDA {built} (torch.version.cuda={built!r}) "
        "but finds no usable GPU: the node's driver may be older than that CUDA version or the "
        "device is not visible to the job (run nvidia-smi in a job on that node)"
    )


def select_device(
    requested: str = "auto", environ: Mapping[str, str] | None = None
) -> torch.device:
    """Resolve ``auto|cpu|cuda|cuda:N``; CUDA indices are those CUDA_VISIBLE_DEVICES exposes.

    ``auto`` is CUDA (the current device) when torch can use it. Otherwise it is the CPU only when
    the job was given no GPU: if CUDA_VISIBLE_DEVICES, SLURM_JOB_GPUS or SLURM_STEP_GPUS names
    one, falling back to the CPU would quietly run a GPU job 50x slower, so this fails instead,
    naming ``torch.version.cuda`` and the fix.
    """
    value = (requested or "auto").strip().lower()
    if value == "auto":
        if torch.cuda.is_available():
            value = "cuda"
        else:
            assigned = gpus_assigned(environ)
            if assigned:
                given = ", ".join(f"{k}={v}" for k, v in assigned.items())
                raise ModelError(
                    f"inference device 'auto': this job was given GPU(s) ({given}) but "
                    f"{_no_cuda_reason()}; or set inference.device: cpu to run on the CPU on "
                    "purpose"
                )
            return torch.device("cpu")
    if value == "cpu":
        return torch.device("cpu")
    if value.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelError(
                f"inference device {requested!r}: CUDA is not available here: {_no_cuda_reason()}"
            )
        if value == "cuda":
            return torch.device("cuda", torch.cuda.current_device())
        try:
            index = int(value.split(":", 1)[1])
        except (IndexError, ValueError) as exc:
            raise ModelError(f"inference device {requested!r}: expected cuda:N") from exc
        count = torch.cuda.device_count()
        if not 0 <= index < count:
            raise ModelError(f"inference device {requested!r}: only {count} CUDA device(s) visible")
        return torch.device("cuda", index)
    raise ModelError(f"inference device {requested!r}: expected auto, cpu, cuda or cuda:N")


def select_dtype(
    requested: str, device_type: str, capability: tuple[int, int] | None = None
) -> torch.dtype:
    """Pick the compute dtype: explicit wins; ``auto``: bf16 on CC >= 8.0, fp16 below, fp32 on CPU.

    ``capability`` is the CUDA compute capability (major, minor); passed in so the rule is
    unit-testable without a GPU. Explicit bf16 below 8.0 is refused: those GPUs have no bf16
    tensor cores, so every GEMM would be emulated (slow) for no accuracy gain over fp16.
    """
    value = (requested or "auto").strip().lower()
    if value != "auto":
        if value not in _DTYPES:
            raise ModelError(
                f"inference dtype {requested!r}: expected auto, float32, bfloat16 or float16"
            )
        dtype = _DTYPES[value]
        if (
            dtype is torch.bfloat16
            and device_type == "cuda"
            and capability is not None
            and tuple(capability) < (8, 0)
        ):
            major, minor = capability
            raise ModelError(
                f"inference dtype {requested!r} on a GPU of compute capability {major}.{minor}: "
                "bfloat16 needs 8.0 or newer (no bf16 tensor cores below, GEMMs would be "
                "emulated); use dtype auto (float16 there) or float32"
            )
        return dtype
    if device_type != "cuda":
        return torch.float32
    if capability is None:
        raise ModelError("inference dtype 'auto' on CUDA needs the device's compute capability")
    return torch.bfloat16 if tuple(capability) >= (8, 0) else torch.float16


def probe_rows(
    attempt: Callable[[int], None], rows: int, cleanup: Callable[[], None] | None = None
) -> int:
    """Largest row count <= ``rows`` (halving) for which ``attempt(rows)`` does not OOM.

    Raises :class:`CannotShrinkError` when even one row runs out of memory. ``cleanup`` runs
    after each OOM, outside the except block so the failed attempt's tensors are released.
    """
    rows = max(1, rows)
    while True:
        message = ""
        try:
            attempt(rows)
        except torch.OutOfMemoryError as exc:
            message = str(exc) or "out of memory"
        if not message:
            return rows
        if cleanup is not None:
            cleanup()
        if rows == 1:
            raise CannotShrinkError(message)
        rows //= 2


def top2_margins(logits: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 logit per row (``inf`` with fewer than two labels, NaN if not finite)."""
    if logits.ndim != 2 or logits.shape[1] < 2:
        return np.full(len(logits), np.inf, dtype=np.float32)
    top = np.partition(logits, -2, axis=1)
    return top[:, -1] - top[:, -2]


def _effective_margin(settings: InferenceSettings, dtype: torch.dtype) -> float:
    """The re-check margin in force: 0 when the compute dtype is already fp32 (nothing to check)."""
    return 0.0 if dtype is torch.float32 else float(settings.recheck_margin)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")


def _sdpa_backend(*args: Any, **kwargs: Any) -> str:
    """The kernel torch's dispatcher picks for these sdpa arguments (flash, efficient, math...)."""
    choose = getattr(torch, "_fused_sdp_choice", None)  # what F.sdpa itself consults
    if choose is None:
        return "unknown"
    params = dict(zip(_SDPA_ARGS, args, strict=False)) | kwargs
    try:
        index = choose(
            params["query"],
            params["key"],
            params["value"],
            params.get("attn_mask"),
            params.get("dropout_p", 0.0),
            params.get("is_causal", False),
            scale=params.get("scale"),
            enable_gqa=params.get("enable_gqa", False),
        )
        return torch.nn.attention.SDPBackend(index).name.lower()
    except (KeyError, RuntimeError, TypeError, ValueError):
        return "unknown"


class _SdpaRecorder(TorchFunctionMode):
    """Records which attention kernel each ``scaled_dot_product_attention`` call dispatches to."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            self.kernels.append(_sdpa_backend(*args, **kwargs))
        return func(*args, **kwargs)


class Engine:
    """Loaded classifiers plus the batching state of one job. Build with :meth:`load`."""

    device: torch.device
    device_name: str
    dtype: torch.dtype
    dtype_name: str

    def __init__(
        self,
        classifiers: list[_Classifier],
        settings: InferenceSettings,
        device: torch.device,
        dtype: torch.dtype,
        shared: SharedTokenizer,
        *,
        fp32: dict[str, LoadedClassifier] | None = None,
        forward_hook: ForwardHook | None = None,
        cache_root: Any = None,
    ) -> None:
        self._classifiers = classifiers
        self.settings = settings
        self.device = device
        self.dtype = dtype
        self.dtype_name = _dtype_name(dtype)
        self.device_name = (
            torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
        )
        self._shared = shared
        self._policy: BatchPolicy | None = None
        self._recheck_policy: BatchPolicy | None = None
        self._forward_hook = forward_hook
        self._cache_root = cache_root
        self._fp32: dict[str, LoadedClassifier] = dict(fp32 or {})
        #: Per-batch cost for the batch planner; ``None`` until the first run picks the default.
        self.batch_cost: int | None = None
        self.probe_s = 0.0
        self.attention_kernels: dict[str, str] = {}
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        specs: Sequence[ClassifierSpec],
        settings: InferenceSettings,
        *,
        forward_hook: ForwardHook | None = None,
        cache_root: Any = None,
    ) -> Engine:
        """Load every classifier (once per distinct model) on the selected device and dtype.

        With a half-precision dtype and a re-check margin above 0, an fp32 copy of each distinct
        model is loaded too (same device). ``forward_hook`` is for fault injection in tests (e.g.
        raising ``torch.OutOfMemoryError`` for large batches); ``cache_root`` overrides where
        rewritten configs are kept.
        """
        if not specs:
            raise ModelError("no classifiers configured")
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ModelError(f"classifier names must be unique: {names}")
        for spec in specs:
            if spec.input not in INPUT_KINDS:
                raise ModelError(
                    f"model {spec.model!r} ({spec.name}): input {spec.input!r} "
                    f"is not one of {list(INPUT_KINDS)}"
                )
        if settings.max_length < 8:
            raise ModelError(f"max_length {settings.max_length} is too small")
        if not settings.recheck_margin >= 0:  # also refuses NaN
            raise ModelError(f"recheck_margin {settings.recheck_margin!r}: expected a number >= 0")
        device = select_device(settings.device)
        capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        dtype = select_dtype(settings.dtype, device.type, capability)
        recheck = _effective_margin(settings, dtype) > 0
        loaded_by_ref: dict[str, LoadedClassifier] = {}
        fp32: dict[str, LoadedClassifier] = {}
        infos: dict[str, TokenizerInfo] = {}
        classifiers: list[_Classifier] = []
        for spec in specs:
            loaded = loaded_by_ref.get(spec.model)
            if loaded is None:
                loaded = load_classifier(
                    spec.model, dtype=dtype, device=device, cache_root=cache_root
                )
                loaded_by_ref[spec.model] = loaded
                if recheck:
                    fp32[spec.model] = load_classifier(
                        spec.model, dtype=torch.float32, device=device, cache_root=cache_root
                    )
            if loaded.tokenizer_hash not in infos:
                infos[loaded.tokenizer_hash] = TokenizerInfo.from_tokenizer(
                    loaded.tokenizer, loaded.tokenizer_hash
                )
            max_length = settings.max_length
            if loaded.max_positions:
                max_length = min(max_length, int(loaded.max_positions))
            key = StreamKey(loaded.tokenizer_hash, spec.input, max_length)
            key_mask_4d = getattr(loaded.model.config, "model_type", "") == "gte"
            classifiers.append(_Classifier(spec, loaded, key, key_mask_4d))
        shared = SharedTokenizer(list(infos.values()))
        return cls(
            classifiers,
            settings,
            device,
            dtype,
            shared,
            fp32=fp32,
            forward_hook=forward_hook,
            cache_root=cache_root,
        )

    @property
    def labels(self) -> dict[str, tuple[str, ...]]:
        """Label names per classifier (index = label id), from each model's id2label."""
        return {c.spec.name: c.loaded.labels for c in self._classifiers}

    @property
    def distinct_tokenizers(self) -> int:
        """How many different tokenizers (by content hash) the classifiers use."""
        return len({c.key.tokenizer_hash for c in self._classifiers})

    @property
    def recheck_margin(self) -> float:
        """The margin in force: 0 when the compute dtype is already fp32."""
        return _effective_margin(self.settings, self.dtype)

    # ------------------------------------------------------------------ tokenize
    def prepare(self, texts: Sequence[str], urls: Sequence[str]) -> Prepared:
        """Tokenize ``texts``/``urls`` for every classifier. CPU only; safe on another thread."""
        if len(texts) != len(urls):
            raise ModelError(f"prepare: {len(texts)} texts but {len(urls)} urls")
        keys = [c.key for c in self._classifiers]
        result = self._shared.encode(texts, urls, keys)
        truncated = np.zeros(len(texts), dtype=bool)
        for key in dict.fromkeys(keys):
            flags = result.streams[key].truncated
            if flags is not None:
                truncated |= flags
        return Prepared(
            docs=len(texts),
            streams=result.streams,
            tokenize_s=result.seconds,
            fallback_docs=result.fallback_docs,
            verified_docs=result.verified_docs,
            truncated_docs=int(truncated.sum()),
        )

    # ------------------------------------------------------------------ batching state
    def _make_policy(self) -> BatchPolicy:
        settings = self.settings
        if settings.batch_size is not None:
            policy = BatchPolicy(batch_size=max(1, settings.batch_size))
        elif settings.batch_tokens is not None:
            policy = BatchPolicy(budget=max(1, settings.batch_tokens))
        elif self.device.type != "cuda":
            policy = BatchPolicy(budget=CPU_BATCH_TOKENS)
        else:
            started = time.perf_counter()
            budget, kernel = self._probe_budget(masked=True)
            self.probe_s = time.perf_counter() - started
            self.attention_kernels["masked"] = kernel
            policy = BatchPolicy(budget=budget)
        if self.batch_cost is None and policy.budget is not None:
            self.batch_cost = (
                max(1024, policy.budget // CUDA_BATCH_COST_DIVISOR)
                if self.device.type == "cuda"
                else CPU_BATCH_COST
            )
        policy.batch_cost = self.batch_cost
        self._detect_kernels()
        return policy

    def _make_recheck_policy(self, main: BatchPolicy) -> BatchPolicy:
        """fp32 batches: on CUDA half the main limit (activations twice the size of bf16/fp16)."""
        shrink = 1.0
        if self.device.type == "cuda":
            shrink = torch.tensor([], dtype=self.dtype).element_size() / 4
        if main.batch_size is not None:
            return BatchPolicy(
                batch_size=max(1, int(main.batch_size * shrink)), max_docs=main.max_docs
            )
        assert main.budget is not None  # BatchPolicy holds a budget or a batch size
        return BatchPolicy(
            budget=max(1, int(main.budget * shrink)),
            max_docs=main.max_docs,
            batch_cost=main.batch_cost,
        )

    def _probe_budget(self, *, masked: bool = True) -> tuple[int, str]:
        """Largest padded-token budget (multiple of the longest length) that fits, by trial.

        With ``masked`` (what the engine uses) the trial batches carry an additive key mask like
        every padded batch does: a mask rules out the flash kernel, and if attention fell back to
        the math kernel its (rows, heads, L, L) scores would need far more memory than the flash
        probe measured. Returns the budget and the attention kernel the trial batch used.
        """
        length = max(c.key.max_length for c in self._classifiers)
        biggest = max(self._classifiers, key=lambda c: c.loaded.num_parameters)
        config = biggest.loaded.model.config
        hidden = int(getattr(config, "hidden_size", 768))
        inner = int(getattr(config, "intermediate_size", 4 * hidden))
        per_token = torch.tensor([], dtype=self.dtype).element_size() * (8 * hidden + 3 * inner)
        free, _total = torch.cuda.mem_get_info(self.device)
        candidate = min(CUDA_MAX_BATCH_TOKENS, int(free * _PROBE_MEMORY_FRACTION / per_token))
        vocab = int(getattr(config, "vocab_size", 1000))
        kernels: list[str] = []

        def attempt(rows: int) -> None:
            ids = torch.randint(5, max(6, vocab), (rows, length), device=self.device)
            mask = None
            if masked:
                real = torch.ones((rows, length), dtype=torch.bool, device=self.device)
                mask = self._key_mask(real, self.dtype)
            recorder = _SdpaRecorder()
            with torch.inference_mode(), recorder:
                self._forward(biggest.loaded.model, biggest.key_mask_4d, ids, mask)
            torch.cuda.synchronize(self.device)
            kernels[:] = recorder.kernels[:1]

        def cleanup() -> None:
            torch.cuda.empty_cache()

        try:
            rows = probe_rows(attempt, max(1, candidate // length), cleanup)
        except CannotShrinkError as exc:
            raise ModelError(
                f"model {biggest.spec.model!r}: one document of {length} tokens does not "
                f"fit in GPU memory ({exc})"
            ) from None
        return rows * length, (kernels[0] if kernels else "none")

    def _detect_kernels(self) -> None:
        """Record the attention kernel of padded and unpadded batches (one-row forwards).

        The kernel choice depends on dtype, head size, device and whether a mask is passed, not
        on the row count, so one row at the longest length (CUDA) or a short one (CPU) answers.
        """
        clf = self._classifiers[0]
        length = clf.key.max_length if self.device.type == "cuda" else min(64, clf.key.max_length)
        ids = torch.full((1, length), 5, dtype=torch.long, device=self.device)
        real = torch.ones((1, length), dtype=torch.bool, device=self.device)
        for name, mask in (("masked", self._key_mask(real, self.dtype)), ("unmasked", None)):
            if name in self.attention_kernels:
                continue
            recorder = _SdpaRecorder()
            with torch.inference_mode(), recorder:
                self._forward(clf.loaded.model, clf.key_mask_4d, ids, mask, hook=False)
            self.attention_kernels[name] = recorder.kernels[0] if recorder.kernels else "none"

    def _fp32_model(self, clf: _Classifier) -> LoadedClassifier:
        """The fp32 copy of a classifier (loaded now if the re-check is off and a row is NaN)."""
        loaded = self._fp32.get(clf.spec.model)
        if loaded is None:
            loaded = load_classifier(
                clf.spec.model,
                dtype=torch.float32,
                device=self.device,
                cache_root=self._cache_root,
            )
            self._fp32[clf.spec.model] = loaded
        return loaded

    # ------------------------------------------------------------------ forward
    def _forward(
        self,
        model: torch.nn.Module,
        key_mask_4d: bool,
        ids: torch.Tensor,
        mask: torch.Tensor | None,
        *,
        hook: bool = True,
    ) -> torch.Tensor:
        """float32 logits (on the device) for one collated batch.

        ``mask`` is an additive (rows, 1, 1, width) key mask in the model's dtype (see
        :meth:`_key_mask`); models other than native GTE get the 2D padding mask instead.
        ``None`` when the batch has no padding.
        """
        if hook and self._forward_hook is not None:
            self._forward_hook(int(ids.shape[0]), int(ids.numel()))
        if mask is not None and mask.dim() == 4 and not key_mask_4d:
            mask = (mask[:, 0, 0, :] == 0).long()
        out = model(input_ids=ids, attention_mask=mask)
        return out.logits.float()

    @staticmethod
    def _key_mask(real: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Additive key-padding mask of shape (rows, 1, 1, width) in ``dtype``.

        transformers passes a 4D mask through unchanged; given the 2D mask it would instead
        expand it to (rows, 1, width, width) on every forward, which on CPU cost more than the
        attention itself (measured 2.3x slower on 8 x 2048 batches). Same logits either way.
        """
        mask = torch.zeros(real.shape, dtype=dtype, device=real.device)
        mask.masked_fill_(~real, torch.finfo(dtype).min)
        return mask[:, None, None, :]

    def _collate(
        self, stream: TokenStream, rows: np.ndarray, width: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        starts = stream.offsets[rows]
        lengths = stream.lengths[rows].astype(np.int64)
        positions = np.arange(width, dtype=np.int64)
        real = positions[None, :] < lengths[:, None]
        gather = np.minimum(starts[:, None] + positions[None, :], max(0, len(stream.ids) - 1))
        ids = np.where(real, stream.ids[gather], stream.pad_id).astype(np.int64)
        ids_t = torch.from_numpy(ids)
        real_t = None if bool(real.all()) else torch.from_numpy(real)
        if self.device.type == "cuda":
            ids_t = ids_t.pin_memory().to(self.device, non_blocking=True)
            if real_t is not None:
                real_t = real_t.pin_memory().to(self.device, non_blocking=True)
        return ids_t, (None if real_t is None else self._key_mask(real_t, dtype))

    def _pass(
        self,
        models: Sequence[tuple[torch.nn.Module, bool]],
        stream: TokenStream,
        rows: np.ndarray,
        lengths: np.ndarray,
        *,
        policy: BatchPolicy,
        dtype: torch.dtype,
        what: str,
    ) -> tuple[list[np.ndarray], _Pass]:
        """Logits of ``models`` for documents ``rows`` (sorted longest first), in that order.

        Batches are queued on the device without waiting; each model's logits come back to the
        host once, at the end. On out-of-memory the policy halves and the plan is redone from
        the failing batch, which is retried.
        """
        work = _Pass()
        pieces: list[list[torch.Tensor]] = [[] for _ in models]
        plan = policy.plan(lengths, 0)
        index = 0
        while index < len(plan):
            start, end = plan[index]
            width = int(lengths[start])
            padded = (end - start) * width
            oom = ""
            try:
                ids, mask = self._collate(stream, rows[start:end], width, dtype)
                outputs = [self._forward(m, mask_4d, ids, mask) for m, mask_4d in models]
            except torch.OutOfMemoryError as exc:
                oom = str(exc) or "out of memory"
            if oom:
                # outside the except block: the traceback (and the activations its frames
                # hold) is gone, so the cache can really be emptied
                ids = mask = None
                outputs = []
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                try:
                    policy.on_oom(end - start, padded)
                except CannotShrinkError as shrink:
                    raise ModelError(f"{what}: {shrink} ({oom})") from None
                plan = policy.plan(lengths, start)
                index = 0
                continue
            for bucket, out in zip(pieces, outputs, strict=True):
                bucket.append(out)
            work.batches += 1
            work.padded_tokens += padded * len(models)
            work.real_tokens += int(lengths[start:end].sum()) * len(models)
            index += 1
        fetched = []
        for (model, _), bucket in zip(models, pieces, strict=True):
            if bucket:
                fetched.append(torch.cat(bucket).cpu().numpy())
            else:
                labels = int(getattr(model.config, "num_labels", 1))
                fetched.append(np.zeros((0, labels), dtype=np.float32))
        return fetched, work

    def _recheck(
        self,
        clf: _Classifier,
        stream: TokenStream,
        order: np.ndarray,
        lengths: np.ndarray,
        first: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, _Recheck]:
        """Re-run near ties and non-finite rows of ``first`` (sorted order) in fp32.

        Returns the final logits (sorted order), which rows were re-run, and the counts.
        """
        info = _Recheck()
        finite = np.isfinite(first).all(axis=1)
        info.nonfinite = int((~finite).sum())
        need = ~finite
        margin = self.recheck_margin
        if margin > 0:
            need |= top2_margins(first) < margin
        if not need.any():
            return first, need, info
        what = f"model {clf.spec.model!r} ({clf.spec.name})"
        if self.dtype is torch.float32:  # only non-finite rows get here: nothing more precise
            bad = order[~finite]
            raise ModelError(
                f"{what}: {info.nonfinite} document(s) got non-finite logits in float32 (first "
                f"at input row {int(bad.min())}); the model or its weights are broken"
            )
        if self._recheck_policy is None:
            assert self._policy is not None  # run() made it
            self._recheck_policy = self._make_recheck_policy(self._policy)
        positions = np.flatnonzero(need)
        fp32 = self._fp32_model(clf)
        (redo,), info.work = self._pass(
            [(fp32.model, clf.key_mask_4d)],
            stream,
            order[positions],
            lengths[positions],
            policy=self._recheck_policy,
            dtype=torch.float32,
            what=f"{what}, fp32 re-check",
        )
        still = ~np.isfinite(redo).all(axis=1)
        if still.any():
            raise ModelError(
                f"{what}: {int(still.sum())} document(s) got non-finite logits in float32 too "
                f"(first at input row {int(order[positions][still].min())}); the model or its "
                "weights are broken"
            )
        info.rechecked = len(positions)
        was = first[positions]
        ok = np.isfinite(was).all(axis=1)
        info.changed = int((was[ok].argmax(axis=1) != redo[ok].argmax(axis=1)).sum())
        if ok.any() and was.shape[1] >= 2:
            top = np.argsort(was[ok], axis=1)[:, -2:]
            rows = np.arange(len(top))
            before = was[ok][rows, top[:, 1]] - was[ok][rows, top[:, 0]]
            after = redo[ok][rows, top[:, 1]] - redo[ok][rows, top[:, 0]]
            info.max_margin_error = float(np.abs(before - after).max())
        too_small = margin > 0 and info.max_margin_error > _WARN_ERROR_FACTOR * margin
        if too_small and clf.spec.name not in self._warned:  # once per job, not per file
            self._warned.add(clf.spec.name)
            log.warning(
                "%s: half and fp32 top-two margins differ by up to %.4f among re-checked "
                "documents, more than %dx recheck_margin %.4f: labels with margins above it "
                "may still depend on the GPU; raise inference.recheck_margin",
                what,
                info.max_margin_error,
                _WARN_ERROR_FACTOR,
                margin,
            )
        final = first.copy()
        final[positions] = redo
        return final, need, info

    # ------------------------------------------------------------------ infer
    def run(self, prepared: Prepared) -> Labels:
        """Classify prepared documents; columns are in input order, nothing is dropped.

        A device failure other than out-of-memory (a CUDA error: illegal address, cuBLAS, an
        Xid-style fault) is raised as :class:`DeviceError` naming the GPU and the host.
        """
        inference = self.infer(prepared)
        return Labels(columns=self._columns(inference.logits), stats=inference.stats)

    def infer(self, prepared: Prepared) -> Inference:
        """Logits per classifier in input order, before and after the re-check (benchmarks)."""
        try:
            return self._infer(prepared)
        except RuntimeError as exc:  # OOM is handled inside; anything else is the device failing
            raise DeviceError(self._device_failure(exc)) from exc

    def _device_failure(self, exc: BaseException) -> str:
        host = socket.gethostname()
        text = f"{self.device} ({self.device_name}) on host {host}: {type(exc).__name__}: {exc}"
        if self.device.type == "cuda":
            text += (
                "; CUDA errors like this usually mean a faulty GPU or driver: the shard will be "
                f"retried, and if it fails on {host} again keep jobs off that node "
                f"(sbatch --exclude={host}) and tell the cluster's admins"
            )
        return text

    def _infer(self, prepared: Prepared) -> Inference:
        if self._policy is None:
            self._policy = self._make_policy()  # on CUDA: the one-off budget probe (probe_s)
        policy = self._policy
        started = time.perf_counter()
        n = prepared.docs
        logits: dict[str, np.ndarray] = {}
        first_pass: dict[str, np.ndarray] = {}
        rechecked: dict[str, np.ndarray] = {}
        checks: dict[str, _Recheck] = {}
        work = _Pass()
        recheck_s = 0.0
        groups: dict[StreamKey, list[_Classifier]] = {}
        for clf in self._classifiers:
            groups.setdefault(clf.key, []).append(clf)
        with torch.inference_mode():
            for key, group in groups.items():
                stream = prepared.streams.get(key)
                if stream is None or len(stream.lengths) != n:
                    raise ModelError(
                        f"model {group[0].spec.model!r}: prepared input does not match this engine"
                    )
                order = np.argsort(-stream.lengths, kind="stable")
                lengths = stream.lengths[order]
                outs, done = self._pass(
                    [(c.loaded.model, c.key_mask_4d) for c in group],
                    stream,
                    order,
                    lengths,
                    policy=policy,
                    dtype=self.dtype,
                    what=f"model {group[0].spec.model!r}",
                )
                work.add(done)
                for clf, first in zip(group, outs, strict=True):
                    t0 = time.perf_counter()
                    final, need, checks[clf.spec.name] = self._recheck(
                        clf, stream, order, lengths, first
                    )
                    recheck_s += time.perf_counter() - t0
                    for out, values in (
                        (logits, final),
                        (first_pass, first),
                        (rechecked, need),
                    ):
                        restored = np.empty_like(values)
                        restored[order] = values
                        out[clf.spec.name] = restored
        infer_s = time.perf_counter() - started
        retries = policy.oom_retries + (
            self._recheck_policy.oom_retries if self._recheck_policy else 0
        )
        real, padded = work.real_tokens, work.padded_tokens
        stats: dict[str, Any] = {
            "docs": n,
            "tokens": real,
            "real_tokens": real,
            "padded_tokens": padded,
            "pad_efficiency": (real / padded) if padded else 1.0,
            "truncated_docs": prepared.truncated_docs,
            "tokenize_s": prepared.tokenize_s,
            "infer_s": infer_s,
            "tokens_per_s": real / infer_s if infer_s > 0 else 0.0,
            "batch_budget": policy.limit,
            "batch_mode": 1 if policy.batch_size is not None else 0,
            "batch_cost": policy.batch_cost if policy.batch_size is None else None,
            "oom_retries": retries,
            "batches": work.batches,
            "probe_s": self.probe_s,
            "attention_kernel": self.attention_kernels.get("masked", "none"),
            "attention_kernel_unmasked": self.attention_kernels.get("unmasked", "none"),
            "recheck_margin": self.recheck_margin,
            "rechecked_docs": {name: c.rechecked for name, c in checks.items()},
            "recheck_changed": {name: c.changed for name, c in checks.items()},
            "nonfinite_docs": {name: c.nonfinite for name, c in checks.items()},
            "recheck_max_margin_error": {
                name: round(c.max_margin_error, 6) for name, c in checks.items()
            },
            "recheck_tokens": sum(c.work.real_tokens for c in checks.values()),
            "recheck_batches": sum(c.work.batches for c in checks.values()),
            "recheck_s": recheck_s,
            "tokenize_fallback_docs": prepared.fallback_docs,
            "tokenize_verified_docs": prepared.verified_docs,
            "distinct_tokenizers": self.distinct_tokenizers,
        }
        return Inference(logits, first_pass, rechecked, stats)

    def _columns(self, logits: dict[str, np.ndarray]) -> dict[str, pa.Array]:
        columns: dict[str, pa.Array] = {}
        for clf in self._classifiers:
            name = clf.spec.name
            matrix = torch.from_numpy(logits[name]).softmax(dim=-1).numpy()
            label_ids = matrix.argmax(axis=1).astype(np.int32)
            scores = matrix[np.arange(len(matrix)), label_ids].astype(np.float32)
            names = pa.array(list(clf.loaded.labels), type=pa.string())
            columns[f"{name}_label"] = names.take(pa.array(label_ids, type=pa.int32()))
            columns[f"{name}_label_id"] = pa.array(label_ids, type=pa.int32())
            columns[f"{name}_score"] = pa.array(scores, type=pa.float32())
            if self.settings.probs:
                flat = pa.array(matrix.astype(np.float16).reshape(-1), type=pa.float16())
                offsets = pa.array(
                    np.arange(len(matrix) + 1, dtype=np.int32) * matrix.shape[1], type=pa.int32()
                )
                columns[f"{name}_probs"] = pa.ListArray.from_arrays(offsets, flat)
        return columns
