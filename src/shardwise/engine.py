"""The classification engine: load classifiers once, ``prepare()`` (CPU) then ``run()`` (device).

Why it is shaped like this (see issue 3 and docs/ARCHITECTURE.md):

* ``prepare`` only tokenizes (shared across classifiers, :mod:`shardwise.tokenization`) and never
  touches torch or the device, so the job can prepare file N+1 on a reader thread while ``run``
  computes file N.
* ``run`` sorts a whole file by token length (longest first), cuts batches under a padded-token
  budget (:mod:`shardwise.batching`), runs every classifier that shares an id stream on the same
  collated batch, and scatters results back to input order.
* The budget on CUDA is probed once per engine (= per job) at the longest length, halved on OOM
  with the failing batch retried (never dropped), and the working value is kept.
* dtype: bf16 on compute capability >= 8.0, fp16 below, fp32 on CPU, unless configured.

This module (with :mod:`shardwise.models` and :mod:`shardwise.tinymodels`) is the only torch
importer in shardwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from shardwise.batching import BatchPolicy, CannotShrinkError
from shardwise.errors import ModelError
from shardwise.models import LoadedClassifier, load_classifier
from shardwise.tokenization import (
    INPUT_KINDS,
    SharedTokenizer,
    StreamKey,
    TokenizerInfo,
    TokenStream,
)

__all__ = [
    "CPU_BATCH_TOKENS",
    "ClassifierSpec",
    "Engine",
    "InferenceSettings",
    "Labels",
    "Prepared",
    "probe_rows",
    "select_device",
    "select_dtype",
]

#: Padded-token budget on CPU: big enough to amortise per-batch overhead, small enough to stay in
#: cache-friendly territory (measured: sorted 16k-token batches beat sorted fixed-32 batches).
CPU_BATCH_TOKENS = 16384
#: Upper bound of the CUDA probe: beyond this a bigger batch does not run faster.
CUDA_MAX_BATCH_TOKENS = 1 << 19
#: Fraction of free GPU memory the first probe candidate is sized for.
_PROBE_MEMORY_FRACTION = 0.6

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


@dataclass
class Labels:
    """Output columns (input order) and engine stats for one ``run``."""

    columns: dict[str, pa.Array]
    stats: dict[str, float | int]


@dataclass
class Prepared:
    """Tokenized documents, ready for :meth:`Engine.run`. Holds no torch objects."""

    docs: int
    streams: dict[StreamKey, TokenStream]
    tokenize_s: float
    fallback_docs: int = 0
    verified_docs: int = 0


@dataclass
class _Classifier:
    spec: ClassifierSpec
    loaded: LoadedClassifier
    key: StreamKey
    key_mask_4d: bool  # the model accepts a ready 4D additive mask (native GTE does)


def select_device(requested: str = "auto") -> torch.device:
    """Resolve ``auto|cpu|cuda|cuda:N``; CUDA indices are those CUDA_VISIBLE_DEVICES exposes."""
    value = (requested or "auto").strip().lower()
    if value == "auto":
        value = "cuda" if torch.cuda.is_available() else "cpu"
    if value == "cpu":
        return torch.device("cpu")
    if value.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelError(f"inference device {requested!r}: CUDA is not available here")
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
    unit-testable without a GPU.
    """
    value = (requested or "auto").strip().lower()
    if value != "auto":
        if value not in _DTYPES:
            raise ModelError(
                f"inference dtype {requested!r}: expected auto, float32, bfloat16 or float16"
            )
        return _DTYPES[value]
    if device_type != "cuda":
        return torch.float32
    if capability is None:
        raise ModelError("inference dtype 'auto' on CUDA needs the device's compute capability")
    return torch.bfloat16 if capability >= (8, 0) else torch.float16


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


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


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
        forward_hook: ForwardHook | None = None,
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
        self._forward_hook = forward_hook
        self.probe_s = 0.0

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

        ``forward_hook`` is for fault injection in tests (e.g. raising ``torch.OutOfMemoryError``
        for large batches); ``cache_root`` overrides where rewritten configs are kept.
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
        device = select_device(settings.device)
        capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        dtype = select_dtype(settings.dtype, device.type, capability)
        loaded_by_ref: dict[str, LoadedClassifier] = {}
        infos: dict[str, TokenizerInfo] = {}
        classifiers: list[_Classifier] = []
        for spec in specs:
            loaded = loaded_by_ref.get(spec.model)
            if loaded is None:
                loaded = load_classifier(
                    spec.model, dtype=dtype, device=device, cache_root=cache_root
                )
                loaded_by_ref[spec.model] = loaded
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
        return cls(classifiers, settings, device, dtype, shared, forward_hook=forward_hook)

    @property
    def labels(self) -> dict[str, tuple[str, ...]]:
        """Label names per classifier (index = label id), from each model's id2label."""
        return {c.spec.name: c.loaded.labels for c in self._classifiers}

    @property
    def distinct_tokenizers(self) -> int:
        """How many different tokenizers (by content hash) the classifiers use."""
        return len({c.key.tokenizer_hash for c in self._classifiers})

    # ------------------------------------------------------------------ tokenize
    def prepare(self, texts: Sequence[str], urls: Sequence[str]) -> Prepared:
        """Tokenize ``texts``/``urls`` for every classifier. CPU only; safe on another thread."""
        if len(texts) != len(urls):
            raise ModelError(f"prepare: {len(texts)} texts but {len(urls)} urls")
        keys = [c.key for c in self._classifiers]
        result = self._shared.encode(texts, urls, keys)
        return Prepared(
            docs=len(texts),
            streams=result.streams,
            tokenize_s=result.seconds,
            fallback_docs=result.fallback_docs,
            verified_docs=result.verified_docs,
        )

    # ------------------------------------------------------------------ infer
    def _make_policy(self) -> BatchPolicy:
        settings = self.settings
        if settings.batch_size is not None:
            return BatchPolicy(batch_size=max(1, settings.batch_size))
        if settings.batch_tokens is not None:
            return BatchPolicy(budget=max(1, settings.batch_tokens))
        if self.device.type != "cuda":
            return BatchPolicy(budget=CPU_BATCH_TOKENS)
        started = time.perf_counter()
        budget = self._probe_budget()
        self.probe_s = time.perf_counter() - started
        return BatchPolicy(budget=budget)

    def _probe_budget(self) -> int:
        """Largest padded-token budget (multiple of the longest length) that fits, by trial."""
        length = max(c.key.max_length for c in self._classifiers)
        biggest = max(self._classifiers, key=lambda c: c.loaded.num_parameters)
        config = biggest.loaded.model.config
        hidden = int(getattr(config, "hidden_size", 768))
        inner = int(getattr(config, "intermediate_size", 4 * hidden))
        per_token = torch.tensor([], dtype=self.dtype).element_size() * (8 * hidden + 3 * inner)
        free, _total = torch.cuda.mem_get_info(self.device)
        candidate = min(CUDA_MAX_BATCH_TOKENS, int(free * _PROBE_MEMORY_FRACTION / per_token))
        vocab = int(getattr(config, "vocab_size", 1000))

        def attempt(rows: int) -> None:
            ids = torch.randint(5, max(6, vocab), (rows, length), device=self.device)
            with torch.inference_mode():
                self._forward(biggest, ids, None)
            torch.cuda.synchronize(self.device)

        def cleanup() -> None:
            torch.cuda.empty_cache()

        try:
            rows = probe_rows(attempt, max(1, candidate // length), cleanup)
        except CannotShrinkError as exc:
            raise ModelError(
                f"model {biggest.spec.model!r}: one document of {length} tokens does not "
                f"fit in GPU memory ({exc})"
            ) from None
        return rows * length

    def _forward(self, clf: _Classifier, ids: torch.Tensor, mask: torch.Tensor | None) -> Any:
        """Probabilities (float32) for one collated batch.

        ``mask`` is a 2D padding mask, or for native GTE models an additive (rows, 1, 1, width)
        key mask (see :meth:`_key_mask`); ``None`` when the batch has no padding.
        """
        if self._forward_hook is not None:
            self._forward_hook(int(ids.shape[0]), int(ids.numel()))
        if mask is not None and mask.dim() == 4 and not clf.key_mask_4d:
            mask = (mask[:, 0, 0, :] == 0).long()
        out = clf.loaded.model(input_ids=ids, attention_mask=mask)
        return out.logits.float().softmax(dim=-1)

    def _key_mask(self, real: torch.Tensor) -> torch.Tensor:
        """Additive key-padding mask of shape (rows, 1, 1, width) in the compute dtype.

        transformers passes a 4D mask through unchanged; given the 2D mask it would instead
        expand it to (rows, 1, width, width) on every forward, which on CPU cost more than the
        attention itself (measured 2.3x slower on 8 x 2048 batches). Same logits either way.
        """
        mask = torch.zeros(real.shape, dtype=self.dtype, device=real.device)
        mask.masked_fill_(~real, torch.finfo(self.dtype).min)
        return mask[:, None, None, :]

    def _collate(
        self, stream: TokenStream, rows: np.ndarray, width: int
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
        return ids_t, (None if real_t is None else self._key_mask(real_t))

    def run(self, prepared: Prepared) -> Labels:
        """Classify prepared documents; columns are in input order, nothing is dropped."""
        if self._policy is None:
            self._policy = self._make_policy()  # on CUDA: the one-off budget probe (probe_s)
        policy = self._policy
        started = time.perf_counter()
        n = prepared.docs
        probs: dict[str, np.ndarray] = {}
        real_tokens = 0
        padded_total = 0
        batches = 0
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
                sorted_lengths = stream.lengths[order]
                pieces: dict[str, list[torch.Tensor]] = {c.spec.name: [] for c in group}
                start = 0
                while start < n:
                    end = policy.cut(sorted_lengths, start)
                    width = int(sorted_lengths[start])
                    padded = (end - start) * width
                    oom = ""
                    try:
                        ids, mask = self._collate(stream, order[start:end], width)
                        outputs = [self._forward(clf, ids, mask) for clf in group]
                    except torch.OutOfMemoryError as exc:
                        oom = str(exc) or "out of memory"
                    if oom:
                        # outside the except block: the traceback (and the activations its
                        # frames hold) is gone, so the cache can really be emptied
                        ids = mask = None
                        outputs = []
                        if self.device.type == "cuda":
                            torch.cuda.empty_cache()
                        try:
                            policy.on_oom(end - start, padded)
                        except CannotShrinkError as shrink:
                            raise ModelError(
                                f"model {group[0].spec.model!r}: {shrink} ({oom})"
                            ) from None
                        continue
                    for clf, out in zip(group, outputs, strict=True):
                        pieces[clf.spec.name].append(out)
                    batches += 1
                    padded_total += padded * len(group)
                    real_tokens += int(sorted_lengths[start:end].sum()) * len(group)
                    start = end
                for clf in group:
                    num_labels = len(clf.loaded.labels)
                    sorted_probs = (
                        torch.cat(pieces[clf.spec.name]).cpu().numpy()
                        if pieces[clf.spec.name]
                        else np.zeros((0, num_labels), dtype=np.float32)
                    )
                    restored = np.empty((n, num_labels), dtype=np.float32)
                    restored[order] = sorted_probs
                    probs[clf.spec.name] = restored
        infer_s = time.perf_counter() - started
        columns = self._columns(probs)
        stats: dict[str, float | int] = {
            "docs": n,
            "tokens": real_tokens,
            "real_tokens": real_tokens,
            "padded_tokens": padded_total,
            "pad_efficiency": (real_tokens / padded_total) if padded_total else 1.0,
            "tokenize_s": prepared.tokenize_s,
            "infer_s": infer_s,
            "tokens_per_s": real_tokens / infer_s if infer_s > 0 else 0.0,
            "batch_budget": policy.limit,
            "batch_mode": 1 if policy.batch_size is not None else 0,
            "oom_retries": policy.oom_retries,
            "batches": batches,
            "probe_s": self.probe_s,
            "tokenize_fallback_docs": prepared.fallback_docs,
            "tokenize_verified_docs": prepared.verified_docs,
            "distinct_tokenizers": self.distinct_tokenizers,
        }
        return Labels(columns=columns, stats=stats)

    def _columns(self, probs: dict[str, np.ndarray]) -> dict[str, pa.Array]:
        columns: dict[str, pa.Array] = {}
        for clf in self._classifiers:
            name = clf.spec.name
            matrix = probs[name]
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
