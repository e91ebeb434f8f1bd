"""The classification engine: load classifiers once, ``prepare()`` (CPU) then ``run()`` (device).

``prepare`` only tokenizes (a reader thread prepares file N+1 while ``run`` computes file
N); ``run`` batches a file sorted longest first under a padded-token budget, runs every
classifier sharing an id stream on the same batch, and re-runs near ties in fp32 from a
checkpoint-loaded copy. docs/engine.md says why, with the measurements. With
``classify.models`` and ``classify.device``, the only torch importer.
"""

import functools
import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import numpy as np
import pyarrow as pa
import torch

from shardwise.classify import compiling, forwardchoice, gpubudget
from shardwise.classify.batching import BatchPolicy, CannotShrinkError
from shardwise.classify.calibration import FALLBACK_SHARE, Calibration
from shardwise.classify.device import (
    SdpaRecorder,
    collate,
    dtype_name,
    key_mask,
    select_device,
    select_dtype,
    strict_fp32,
)
from shardwise.classify.models import LoadedClassifier, load_classifier
from shardwise.classify.packed import PackedGte, pack
from shardwise.classify.recheck import (
    AUTO,
    WARN_ERROR_FACTOR,
    Outcome,
    fidelity,
    recheck,
    rechecks,
)
from shardwise.classify.tokenization import (
    INPUT_KINDS,
    SharedTokenizer,
    StreamKey,
    TokenizerInfo,
    TokenStream,
)
from shardwise.config import InferenceSettings
from shardwise.errors import DeviceError, ModelError
from shardwise.run import budgets
from shardwise.run.sidecar import label_columns

log = logging.getLogger("shardwise.classify.engine")

#: Padded-token budget on CPU: big enough to amortise per-batch overhead, small enough to stay in
#: cache-friendly territory (measured: sorted 16k-token batches beat sorted fixed-32 batches).
CPU_BATCH_TOKENS = 16384
#: Per-batch cost (in tokens) the CPU batch planner weighs against padding; measured with
#: ``bench/classify.py`` at the tiny and the proxy shape (see docs/engine.md).
CPU_BATCH_COST = 128
#: On CUDA the per-batch cost is the budget divided by this: a batch must save that share of a
#: full batch in padding to be worth a forward of its own (launch overhead, an under-filled GPU).
CUDA_BATCH_COST_DIVISOR = 64
#: Called before every forward with ``(rows, padded_tokens)``; may raise to simulate faults.
ForwardHook = Callable[[int, int], None]


@dataclass(frozen=True)
class ClassifierSpec:
    """One classifier: output column prefix, hub id or local directory, and its input format."""

    name: str
    model: str  # hub id or local directory
    input: str  # "url_text" -> "{url}\n\n{text}", "text" -> "{text}"


@dataclass
class Labels:
    """Output columns (input order) and the engine's figures for one ``run`` (written as
    ``engine`` in each file's stats; every key is described in docs/engine.md)."""

    columns: dict[str, pa.Array]
    stats: dict[str, Any]


@dataclass(kw_only=True)
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
    packed: PackedGte | None = None  # the packed forward, while the job runs packed batches


@dataclass
class _Pass:
    """Work counters of one or more batch passes."""

    batches: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0

    def add(self, other: Self) -> None:
        self.batches += other.batches
        self.real_tokens += other.real_tokens
        self.padded_tokens += other.padded_tokens


@dataclass
class _Recheck:
    """What the fp32 re-check (or the fp32 fall-back) did for one classifier in one ``run``."""

    outcome: Outcome = field(default_factory=Outcome)
    mode: str = "recheck"  # recheck (auto) | float32 (calibrated fall-back) | pinned | fp32 dtype
    work: _Pass = field(default_factory=_Pass)


@dataclass
class Inference:
    """Logits of one ``run`` (input order) before and after the re-check, plus stats."""

    logits: dict[str, np.ndarray]  # final (after the re-check)
    first_pass: dict[str, np.ndarray]  # the compute dtype's own logits
    rechecked: dict[str, np.ndarray]  # bool per document: re-run in fp32
    stats: dict[str, Any]


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
        self.dtype_name = dtype_name(dtype)
        cuda = device.type == "cuda"
        self.device_name = torch.cuda.get_device_name(device) if cuda else device.type
        self._shared = shared
        self._policy: BatchPolicy | None = None
        self._recheck_policy: BatchPolicy | None = None
        self._forward_hook = forward_hook
        self._cache_root = cache_root
        self._fp32: dict[str, LoadedClassifier] = dict(fp32 or {})
        #: Per-batch cost for the batch planner; ``None`` until the first run picks the default.
        self.batch_cost: int | None = None
        self.probe_s = 0.0
        self.budget_cached = False  # the CUDA budget came from an earlier job's probe
        self._budget_dir: Path | None = None
        self.attention_kernels: dict[str, str] = {}
        self._warned: set[str] = set()
        #: Per classifier, the job's calibration of the re-check threshold (auto only).
        self.calibrations: dict[str, Calibration] = {}
        #: The forward the job runs (``forwardchoice.Forward``: chosen, then self-checked).
        self.forward: forwardchoice.Forward = forwardchoice.UNCHOSEN
        #: Whether float32 matmuls were checked to be float32 here (:func:`strict_fp32`).
        self.fp32_matmul_ok = True

    @classmethod
    def load(
        cls,
        specs: Sequence[ClassifierSpec],
        settings: InferenceSettings,
        *,
        forward_hook: ForwardHook | None = None,
        cache_root: Any = None,
        budget_dir: Path | None = None,
    ) -> Self:
        """Load every classifier (once per distinct model) on the selected device and dtype,
        and an fp32 copy when half precision is re-checked. ``forward_hook`` injects faults
        in tests; ``cache_root`` overrides where rewritten configs are kept; ``budget_dir``
        keeps the CUDA batch budget probed per kind of GPU (``run/budgets.py``)."""
        if not specs:
            raise ModelError("no classifiers configured")
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ModelError(f"classifier names must be unique: {names}")
        for spec in specs:
            if spec.input not in INPUT_KINDS:
                msg = f"model {spec.model!r} ({spec.name}): input {spec.input!r} "
                raise ModelError(msg + f"is not one of {list(INPUT_KINDS)}")
        if settings.max_length < 8:
            raise ModelError(f"max_length {settings.max_length} is too small")
        margin = settings.recheck_margin
        number = isinstance(margin, int | float) and not isinstance(margin, bool)
        if margin != AUTO and not (number and margin >= 0):  # also refuses NaN
            raise ModelError(f"recheck_margin {margin!r}: expected 'auto' or a number >= 0")
        device = select_device(settings.device)
        fp32_problem = strict_fp32(device)  # once per job: the re-check's fp32 is fp32
        if fp32_problem:
            log.warning("%s", fp32_problem)
        capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        dtype = select_dtype(settings.dtype, device.type, capability)
        if device.type == "cpu" and dtype is not torch.float32:  # device auto, no GPU here
            text = "inference.dtype %s on the CPU: half precision is slower than float32 there "
            text += "and its re-check runs documents again in float32; use dtype auto"
            log.warning(text, settings.dtype)
        recheck = rechecks(settings.recheck_margin, dtype is not torch.float32)
        loaded_by_ref: dict[str, LoadedClassifier] = {}
        fp32: dict[str, LoadedClassifier] = {}
        infos: dict[str, TokenizerInfo] = {}
        classifiers = []
        for spec in specs:
            loaded = loaded_by_ref.get(spec.model)
            if loaded is None:
                load = functools.partial(
                    load_classifier, spec.model, device=device, cache_root=cache_root
                )
                loaded = loaded_by_ref[spec.model] = load(dtype=dtype)
                if recheck:
                    fp32[spec.model] = load(dtype=torch.float32)
            tokenizer = loaded.tokenizer_hash
            if tokenizer not in infos:
                infos[tokenizer] = TokenizerInfo.from_tokenizer(loaded.tokenizer, tokenizer)
            max_length = min(settings.max_length, int(loaded.max_positions or settings.max_length))
            key = StreamKey(tokenizer, spec.input, max_length)
            key_mask_4d = getattr(loaded.model.config, "model_type", "") == "gte"
            classifiers.append(_Classifier(spec, loaded, key, key_mask_4d))
        shared = SharedTokenizer(list(infos.values()))
        engine = cls(
            classifiers,
            settings,
            device,
            dtype,
            shared,
            fp32=fp32,
            forward_hook=forward_hook,
            cache_root=cache_root,
        )
        engine._budget_dir = budget_dir
        engine.forward = forwardchoice.choose(engine, capability)
        engine.fp32_matmul_ok = not fp32_problem
        return engine

    attention = property(lambda self: self.forward.attention, doc="the attention chosen")
    compile = property(lambda self: self.forward.compile, doc="whether packed runs compiled")
    compile_s = property(lambda self: self.forward.compile_s, doc="the first compiled call's s")
    compile_kernels = property(lambda self: self.forward.kernels, doc="Inductor's hits, misses")
    compile_cache = property(lambda self: self.forward.cache, doc="where the kernels are kept")
    self_checks = property(lambda self: self.forward.self_checks, doc="each model's self-check")

    @property
    def labels(self) -> dict[str, tuple[str, ...]]:
        """Label names per classifier (index = label id), from each model's id2label."""
        return {c.spec.name: c.loaded.labels for c in self._classifiers}

    @property
    def distinct_tokenizers(self) -> int:
        """How many different tokenizers (by content hash) the classifiers use."""
        return len({c.key.tokenizer_hash for c in self._classifiers})

    @property
    def recheck_margin(self) -> float | str:
        """The margin in force: "auto", a pinned number, or 0 when the compute dtype is
        already fp32 (nothing to re-check)."""
        if not rechecks(self.settings.recheck_margin, self.dtype is not torch.float32):
            return 0.0
        margin = self.settings.recheck_margin
        return AUTO if margin == AUTO else float(margin)

    def _calibration(self, clf: _Classifier) -> Calibration | None:
        """The classifier's calibration, with ``recheck_margin: auto`` in half precision:
        the one an earlier job of this set-up recorded (``run/budgets.py``), else a new
        one this job samples."""
        if self.recheck_margin != AUTO:
            return None
        found = self.calibrations.get(clf.spec.name)
        if found is None:
            record = budgets.calibration(self._budget_dir, self._calibration_key(clf))
            found = Calibration() if record is None else Calibration.of_record(record)
            self.calibrations[clf.spec.name] = found
        return found

    def _calibration_key(self, clf: _Classifier) -> budgets.CalibrationKey:
        return budgets.CalibrationKey(
            classifier=clf.spec.name,
            model=clf.spec.model,
            device=self.device_name,
            dtype=self.dtype_name,
            torch=str(torch.__version__),
            max_length=clf.key.max_length,
        )

    def _keep_calibration(self, clf: _Classifier, calibration: Calibration | None) -> None:
        """Keep a calibration this job's sample grew, for later jobs (they sample only what
        is missing, none once it is full)."""
        if calibration is None or not calibration.grown:
            return
        at = datetime.now(UTC).isoformat(timespec="seconds")
        key = self._calibration_key(clf)
        budgets.record_calibration(self._budget_dir, calibration.record(key, at))
        calibration.kept = len(calibration.errors)

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

    def _make_policy(self) -> BatchPolicy:
        settings = self.settings
        if settings.batch_size is not None:
            policy = BatchPolicy(batch_size=max(1, settings.batch_size))
        elif settings.batch_tokens is not None:
            policy = BatchPolicy(budget=max(1, settings.batch_tokens))
        elif self.device.type != "cuda":
            policy = BatchPolicy(budget=CPU_BATCH_TOKENS)
        else:  # probed once per kind of GPU and set-up: later jobs read the run's record
            budget, self.budget_cached = budgets.cached(
                self._budget_dir, gpubudget.budget_key(self), lambda: gpubudget.timed_probe(self)
            )
            self.probe_s = 0.0 if self.budget_cached else budget.probe_s
            self.attention_kernels["masked"] = budget.kernel
            policy = BatchPolicy(budget=budget.tokens)
        if self.batch_cost is None and policy.budget is not None:
            cuda_cost = max(1024, policy.budget // CUDA_BATCH_COST_DIVISOR)
            self.batch_cost = cuda_cost if self.device.type == "cuda" else CPU_BATCH_COST
        policy.batch_cost = self.batch_cost
        self._detect_kernels()
        return policy

    def _make_recheck_policy(self, main: BatchPolicy) -> BatchPolicy:
        """fp32 batches: on CUDA half the main limit (activations twice the size of bf16/fp16)."""
        shrink = 1.0
        if self.device.type == "cuda":
            shrink = torch.tensor([], dtype=self.dtype).element_size() / 4
        if main.batch_size is not None:
            size = max(1, int(main.batch_size * shrink))
            return BatchPolicy(batch_size=size, max_docs=main.max_docs)
        assert main.budget is not None  # BatchPolicy holds a budget or a batch size
        budget = max(1, int(main.budget * shrink))
        return BatchPolicy(budget=budget, max_docs=main.max_docs, batch_cost=main.batch_cost)

    def _detect_kernels(self) -> None:
        """Record the attention kernel of padded and unpadded batches: it depends on dtype,
        head size, device and the mask, not on the row count, so a one-row forward answers."""
        clf = self._classifiers[0]
        length = clf.key.max_length if self.device.type == "cuda" else min(64, clf.key.max_length)
        ids = torch.full((1, length), 5, dtype=torch.long, device=self.device)
        real = torch.ones((1, length), dtype=torch.bool, device=self.device)
        for name, mask in (("masked", key_mask(real, self.dtype)), ("unmasked", None)):
            if name in self.attention_kernels:
                continue
            recorder = SdpaRecorder()
            with torch.inference_mode(), recorder:
                self._forward(clf.loaded.model, clf.key_mask_4d, ids, mask, hook=False)
            self.attention_kernels[name] = recorder.kernels[0] if recorder.kernels else "none"

    def _fp32_model(self, clf: _Classifier) -> LoadedClassifier:
        """The fp32 copy of a classifier (loaded now if the re-check is off and a row is NaN)."""
        loaded = self._fp32.get(clf.spec.model)
        if loaded is None:
            loaded = load_classifier(
                clf.spec.model, dtype=torch.float32, device=self.device, cache_root=self._cache_root
            )
            self._fp32[clf.spec.model] = loaded
        return loaded

    def _forward(
        self,
        model: torch.nn.Module,
        key_mask_4d: bool,
        ids: torch.Tensor,
        mask: torch.Tensor | None,
        *,
        hook: bool = True,
    ) -> torch.Tensor:
        """float32 logits (on the device) for one collated batch. ``mask``: an additive
        (rows, 1, 1, width) key mask (None: no padding); models other than native GTE get
        the 2D padding mask instead."""
        if hook and self._forward_hook is not None:
            self._forward_hook(int(ids.shape[0]), int(ids.numel()))
        if mask is not None and mask.dim() == 4 and not key_mask_4d:
            mask = (mask[:, 0, 0, :] == 0).long()
        out = model(input_ids=ids, attention_mask=mask)
        return out.logits.float()

    def _packed_kernel(self) -> str | None:
        """The packed forward's attention (``varlen_flash``, ``varlen_flash:FA3`` where
        torch routes it to FlashAttention-3, or ``reference``), if it runs."""
        runs = next((c.packed for c in self._classifiers if c.packed is not None), None)
        if runs is None:
            return None
        kernel = runs.attention_kernel(self.dtype, self.device)
        impl = forwardchoice.active_flash() if kernel == "varlen_flash" else None
        return f"{kernel}:{impl}" if impl else kernel

    def _forward_packed(
        self, packed: PackedGte, batch: Any, rows: int, tokens: int
    ) -> torch.Tensor:
        """float32 logits of one packed batch (the fault hook sees its rows and tokens)."""
        if self._forward_hook is not None:
            self._forward_hook(rows, tokens)
        return packed.logits(batch)

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
        packed: Sequence[PackedGte] = (),
    ) -> tuple[list[np.ndarray], _Pass]:
        """Logits of ``models`` for documents ``rows`` (sorted longest first), in that order:
        batches are queued without waiting, each model's logits fetched once at the end. On
        out-of-memory the policy halves and the failing batch is retried. ``packed``: the
        models' packed forwards (one each), run on packed batches instead."""
        work = _Pass()
        pieces: list[list[torch.Tensor]] = [[] for _ in models]
        plan = policy.plan(lengths, 0)
        index = 0
        while index < len(plan):
            start, end = plan[index]
            width = int(lengths[start])
            padded = (end - start) * width
            real = int(lengths[start:end].sum())
            size = real if packed else padded
            oom = ""
            try:
                if packed:
                    batch = pack(stream, rows[start:end], self.device)
                    outputs = [self._forward_packed(p, batch, end - start, real) for p in packed]
                else:
                    ids, mask = collate(stream, rows[start:end], width, dtype, self.device)
                    outputs = [self._forward(m, mask_4d, ids, mask) for m, mask_4d in models]
            except torch.OutOfMemoryError as exc:
                oom = str(exc) or "out of memory"
            if oom:
                # outside the except block: the traceback (and the activations its frames
                # hold) is gone, so the cache can really be emptied
                ids = mask = batch = None
                outputs = []
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                try:
                    policy.on_oom(end - start, size)
                except CannotShrinkError as shrink:
                    raise ModelError(f"{what}: {shrink} ({oom})") from None
                plan = policy.plan(lengths, start)
                index = 0
                continue
            for bucket, out in zip(pieces, outputs, strict=True):
                bucket.append(out)
            work.batches += 1
            work.padded_tokens += size * len(models)
            work.real_tokens += real * len(models)
            index += 1
        fetched = [
            torch.cat(bucket).cpu().numpy()
            if bucket
            else np.zeros((0, int(getattr(model.config, "num_labels", 1))), dtype=np.float32)
            for (model, _), bucket in zip(models, pieces, strict=True)
        ]
        return fetched, work

    def _recheck(
        self,
        clf: _Classifier,
        stream: TokenStream,
        order: np.ndarray,
        lengths: np.ndarray,
        first: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, _Recheck]:
        """Re-run near ties and non-finite rows of ``first`` (sorted order) in fp32
        (``recheck.recheck`` decides which); the final logits, those rows, what it did."""
        what = f"model {clf.spec.model!r} ({clf.spec.name})"
        margin = self.recheck_margin
        info = _Recheck(mode="recheck" if margin == AUTO else "pinned")
        if self.dtype is torch.float32:  # nothing more precise: a non-finite row is broken
            info.mode = "fp32"
            _require_finite(first, order, what, "")
            return first, np.zeros(len(first), bool), info

        def run_fp32(positions: np.ndarray) -> np.ndarray:
            why = f"{what}, fp32 re-check"
            (redo,), work = self._fp32_pass(clf, stream, order[positions], lengths[positions], why)
            info.work.add(work)
            _require_finite(redo, order[positions], what, " too")
            return redo

        calibration = self._calibration(clf)
        final, done, info.outcome = recheck(first, lengths, margin, calibration, run_fp32)
        self._keep_calibration(clf, calibration)
        if info.outcome.fp32_share is not None:  # once per job: the switch happens once
            _say_fp32(what, info.outcome.fp32_share, calibration)
        if info.outcome.too_small and clf.spec.name not in self._warned:  # once per job
            self._warned.add(clf.spec.name)
            log.warning(
                "%s: half and fp32 top-two margins differ by up to %.4f among re-checked "
                "documents, more than %dx recheck_margin %.4f: labels with margins above it "
                "may still depend on the GPU; use inference.recheck_margin: auto",
                what,
                info.outcome.max_margin_error,
                WARN_ERROR_FACTOR,
                margin,
            )
        return final, done, info

    def _in_fp32(self, clf: _Classifier) -> bool:
        """Whether the job's calibration sent this classifier to fp32 for good."""
        calibration = self.calibrations.get(clf.spec.name)
        return calibration is not None and calibration.fp32

    def _fp32_only(
        self, clf: _Classifier, stream: TokenStream, order: np.ndarray, lengths: np.ndarray
    ) -> tuple[np.ndarray, _Recheck]:
        """One fp32 pass of a classifier the calibration sent to fp32 (no half pass)."""
        info = _Recheck(mode="float32")
        what = f"model {clf.spec.model!r} ({clf.spec.name}), fp32"
        (final,), info.work = self._fp32_pass(clf, stream, order, lengths, what)
        info.outcome = Outcome(rechecked=len(order), residual=0.0, residual_upper=0.0)
        return final, info

    def _fp32_pass(
        self,
        clf: _Classifier,
        stream: TokenStream,
        rows: np.ndarray,
        lengths: np.ndarray,
        what: str,
    ) -> tuple[list[np.ndarray], _Pass]:
        """One fp32 pass of one classifier, in the fp32 batches (made on first use)."""
        if self._recheck_policy is None:
            assert self._policy is not None  # run() made it
            self._recheck_policy = self._make_recheck_policy(self._policy)
        model = [(self._fp32_model(clf).model, clf.key_mask_4d)]
        return self._pass(
            model,
            stream,
            rows,
            lengths,
            policy=self._recheck_policy,
            dtype=torch.float32,
            what=what,
        )

    def run(self, prepared: Prepared) -> Labels:
        """Classify prepared documents; columns are in input order, nothing is dropped.

        A device failure other than out-of-memory (a CUDA error: illegal address, cuBLAS, an
        Xid-style fault) is raised as :class:`DeviceError` naming the GPU and the host.
        """
        inference = self.infer(prepared)
        columns: dict[str, pa.Array] = {}
        for clf in self._classifiers:
            name = clf.spec.name
            probs = torch.from_numpy(inference.logits[name]).softmax(dim=-1).numpy()
            columns.update(label_columns(name, probs, clf.loaded.labels, self.settings.probs))
        return Labels(columns=columns, stats=inference.stats)

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
            text += "; CUDA errors like this usually mean a faulty GPU or driver: the shard "
            text += f"will be retried, and if it fails on {host} again keep jobs off that node "
            text += f"(sbatch --exclude={host}) and tell the cluster's admins"
        return text

    def _infer(self, prepared: Prepared) -> Inference:
        if self._policy is None:
            self._policy = self._make_policy()  # on CUDA: the one-off budget probe (probe_s)
        if self.attention.mode == "packed" and not self.self_checks and prepared.docs:
            self.forward = forwardchoice.check_packed(self, self.forward, prepared)
        self._policy.packed = self.attention.mode == "packed"
        started = time.perf_counter()
        result = Inference({}, {}, {}, {})
        checks: dict[str, _Recheck] = {}
        work = _Pass()
        recheck_s = 0.0
        groups: dict[StreamKey, list[_Classifier]] = {}
        for clf in self._classifiers:
            groups.setdefault(clf.key, []).append(clf)
        with torch.inference_mode():
            for key, group in groups.items():
                stream = prepared.streams.get(key)
                if stream is None or len(stream.lengths) != prepared.docs:
                    model = group[0].spec.model
                    raise ModelError(f"model {model!r}: prepared input does not match this engine")
                recheck_s += self._infer_group(group, stream, result, checks, work)
        result.stats = self._stats(prepared, work, checks, time.perf_counter() - started, recheck_s)
        return result

    def _infer_group(
        self,
        group: list[_Classifier],
        stream: TokenStream,
        result: Inference,
        checks: dict[str, _Recheck],
        work: _Pass,
    ) -> float:
        """The classifiers that share one token stream: one half-precision pass for those
        not gone fp32, each re-checked, into ``result`` in input order; the re-check's
        seconds."""
        order = np.argsort(-stream.lengths, kind="stable")
        lengths = stream.lengths[order]
        half = [c for c in group if not self._in_fp32(c)]
        full = [c for c in group if self._in_fp32(c)]
        outs: list[np.ndarray] = []
        if half:
            assert self._policy is not None  # _infer made it
            models = [(c.loaded.model, c.key_mask_4d) for c in half]
            outs, done = self._pass(
                models,
                stream,
                order,
                lengths,
                policy=self._policy,
                dtype=self.dtype,
                what=f"model {half[0].spec.model!r}",
                packed=[c.packed for c in half if c.packed is not None],
            )
            work.add(done)
        t0 = time.perf_counter()
        results: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
        for clf, first in zip(half, outs, strict=True):
            final, need, checks[clf.spec.name] = self._recheck(clf, stream, order, lengths, first)
            results.append((clf.spec.name, first, final, need))
        for clf in full:  # the calibration said half precision buys nothing here
            final, checks[clf.spec.name] = self._fp32_only(clf, stream, order, lengths)
            results.append((clf.spec.name, final, final, np.ones(len(order), bool)))
        recheck_s = time.perf_counter() - t0
        for name, first, final, need in results:  # back to input order
            for into, values in (
                (result.logits, final), (result.first_pass, first), (result.rechecked, need)
            ):  # fmt: skip
                into[name] = np.empty_like(values)
                into[name][order] = values
        return recheck_s

    def _stats(
        self,
        prepared: Prepared,
        work: _Pass,
        checks: dict[str, _Recheck],
        infer_s: float,
        recheck_s: float,
    ) -> dict[str, Any]:
        """The engine's figures of one ``run`` (``Labels.stats``, every key documented there)."""
        policy = self._policy
        assert policy is not None  # run() made it
        fp32 = self._recheck_policy
        real, padded = work.real_tokens, work.padded_tokens
        return {
            "docs": prepared.docs,
            "tokens": real,
            "real_tokens": real,
            "padded_tokens": padded,
            "pad_efficiency": (real / padded) if padded else 1.0,
            "truncated_docs": prepared.truncated_docs,
            "tokenize_s": prepared.tokenize_s,
            "infer_s": infer_s,
            "infer_tokens_per_s": real / infer_s if infer_s > 0 else 0.0,
            "batch_budget": policy.limit,
            "batch_mode": 1 if policy.batch_size is not None else 0,
            "batch_cost": policy.batch_cost if policy.batch_size is None else None,
            "oom_retries": policy.oom_retries + (fp32.oom_retries if fp32 else 0),
            "batches": work.batches,
            "probe_s": self.probe_s,
            "budget_cached": self.budget_cached,
            **self._choice_figures(),
            "fp32_matmul_ok": self.fp32_matmul_ok,
            "recheck_margin": self.recheck_margin,
            **self._recheck_figures(prepared.docs, checks, recheck_s, infer_s),
            "tokenize_fallback_docs": prepared.fallback_docs,
            "tokenize_verified_docs": prepared.verified_docs,
            "distinct_tokenizers": self.distinct_tokenizers,
        }

    def _choice_figures(self) -> dict[str, Any]:
        """What the job chose to run (attention kernels, the compiled forward, its cache)."""
        cache = self.compile_cache
        return {
            "attention_kernel": self.attention_kernels.get("masked", "none"),
            "attention_kernel_unmasked": self.attention_kernels.get("unmasked", "none"),
            "attention": self.attention.mode,
            "attention_reason": self.attention.reason,
            "attention_kernel_packed": self._packed_kernel(),
            "attention_self_check": [c.to_json() for c in self.self_checks],
            "compile": self.compile.on,
            "compile_reason": self.compile.reason,
            "compile_s": self.compile_s,
            "compile_cache": cache.directory if cache else None,
            "compile_source": cache.source if cache else None,
            "compile_artifact": cache.artifact if cache else None,
            "compile_kernels_hit": self.compile_kernels[0] if cache else None,
            "compile_kernels_missed": self.compile_kernels[1] if cache else None,
            "compile_graphs": compiling.graphs_compiled() if cache else None,
        }

    def _recheck_figures(
        self, docs: int, checks: dict[str, _Recheck], recheck_s: float, infer_s: float
    ) -> dict[str, Any]:
        """The fp32 re-check of one ``run``: what it re-checked and changed, its cost."""
        outcomes = {name: c.outcome for name, c in checks.items()}
        on_cpu = self.device.type == "cpu"
        kept = [
            fidelity(name, docs, c.mode, c.outcome, on_cpu=on_cpu).to_json()
            for name, c in checks.items()
        ]
        return {
            "rechecked_docs": {name: o.rechecked for name, o in outcomes.items()},
            "recheck_changed": {name: o.changed for name, o in outcomes.items()},
            "nonfinite_docs": {name: o.nonfinite for name, o in outcomes.items()},
            "recheck_max_margin_error": {
                name: round(o.max_margin_error, 6) for name, o in outcomes.items()
            },
            "calibration": {name: cal.summary() for name, cal in self.calibrations.items()},
            "calibration_s": sum(o.sample_s for o in outcomes.values()),
            "fidelity": kept,
            "recheck_tokens": sum(c.work.real_tokens for c in checks.values()),
            "recheck_batches": sum(c.work.batches for c in checks.values()),
            "recheck_s": recheck_s,
            "recheck_share": recheck_s / infer_s if infer_s > 0 else 0.0,
        }


def _say_fp32(what: str, share: float, calibration: Calibration | None) -> None:
    """The console line of a classifier that goes wholly to fp32 (about 10-15x slower)."""
    threshold = max((t for _, t in calibration.buckets()), default=0.0) if calibration else 0.0
    log.warning(
        "%s: %.0f%% of this file's documents have a top-two margin under the calibrated "
        "re-check threshold (up to %.4f: half precision moves margins that much here), more "
        "than %.0f%%: the classifier runs wholly in float32 for the rest of this job, about "
        "10-15x slower than half precision; inference.dtype: float32 does so from the start",
        what,
        100 * share,
        threshold,
        100 * FALLBACK_SHARE,
    )


def _require_finite(logits: np.ndarray, rows: np.ndarray, what: str, also: str) -> None:
    """Fail when fp32 ``logits`` (one row per input row ``rows``) hold a non-finite value:
    nothing is more precise than fp32, so the model or its weights are broken."""
    bad = ~np.isfinite(logits).all(axis=1)
    if bad.any():
        msg = f"{what}: {int(bad.sum())} document(s) got non-finite logits in float32{also} "
        msg += f"(first at input row {int(rows[bad].min())}); the model or its weights are broken"
        raise ModelError(msg)
