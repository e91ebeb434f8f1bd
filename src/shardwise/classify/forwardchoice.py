"""Which forward a job runs, decided once per kind of GPU: ``attention.choose`` on the
device's facts (torch's ``varlen_attn``, the compute capability, half precision), each
model's projections fused where packed runs, and the self-check before the first packed
batch; then whether the packed forward runs compiled (``classify/compiling.py``). A
padded (or eager) verdict of ``auto`` on CUDA (a kernel the GPU or torch lacks, a failed
self-check) is said once, in the first job that finds it, and recorded beside the batch
budget (``run/budgets.py``): later jobs of that kind of GPU decide at once, the reason
in their stats, and repeat no failing self-check."""

import importlib.util
import logging
import sys
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from shardwise.classify import attention, compiling, fused, gpubudget, packed
from shardwise.classify.device import collate
from shardwise.classify.packed import PackedGte, pack, supports
from shardwise.config import InferenceSettings
from shardwise.errors import ModelError
from shardwise.run import budgets
from shardwise.run.failures import first_line

log = logging.getLogger("shardwise.classify.engine")


#: The compile choice before one is made.
COMPILE_OFF = compiling.CompileChoice(False, "inference.compile: off")


@dataclass(frozen=True)
class Forward:
    """The forward a job runs: the attention (packed until its self-check says otherwise),
    whether the packed forward runs compiled, where Inductor keeps what it compiled and
    where that came from, the seconds the first compiled call took (compiling included)
    and Inductor's cache hits and misses then, each model's self-check. Made by
    :func:`choose`, then :func:`check_packed`; the engine keeps the newest."""

    attention: attention.Choice
    compile: compiling.CompileChoice = COMPILE_OFF
    cache: compiling.CompileCache | None = None
    compile_s: float = 0.0
    kernels: tuple[int, int] = (0, 0)
    self_checks: tuple[attention.SelfCheck, ...] = ()


#: An engine's forward before the choice.
UNCHOSEN = Forward(attention.Choice("padded", "inference.attention: padded"))


class Chooser(Protocol):
    """What choosing and self-checking the forward read of the engine (``engine.Engine``):
    the settings, the device and dtype, the classifiers (each gets its packed forward
    here), where the run directory keeps budgets and verdicts, and the padded forward."""

    settings: InferenceSettings
    device: torch.device
    dtype: torch.dtype
    device_name: str
    dtype_name: str
    _classifiers: list[Any]
    _budget_dir: Path | None
    _fp32: dict[str, Any]

    def _forward(self, model: Any, key_mask: Any, ids: Any, mask: Any, *, hook: bool) -> Any: ...


def choose(engine: Chooser, capability: tuple[int, int] | None) -> Forward:
    """The job's forward (``inference.attention``, ``inference.compile``); a packed one
    fuses each model's projections once, here (the padded forward shares the fused
    weights)."""
    classifiers, setting = engine._classifiers, engine.settings.attention
    unsupported = [c.spec.name for c in classifiers if not supports(c.loaded.model)]
    cuda, auto = engine.device.type == "cuda", setting == "auto"
    # this kind of GPU's key, once for both choices: where an auto one reads its verdict
    wants_key = cuda and (auto or engine.settings.compile == "auto")
    key = gpubudget.budget_key(engine) if wants_key else None
    mine = key if auto else None
    before = budgets.verdict(engine._budget_dir, mine, "attention") if mine is not None else None
    facts = attention.DeviceFacts(
        cuda=cuda,
        half=engine.dtype is not torch.float32,
        capability=capability,
        varlen=packed.varlen_attn is not None,
        torch_version=str(torch.__version__),
        decided_before=before.reason if before is not None else None,
        fa3=cuda and importlib.util.find_spec("flash_attn_interface") is not None,
    )
    try:
        choice = attention.choose(setting, facts, unsupported)
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    if choice.mode == "packed":
        choice = _activate(choice)
        forwards: dict[str, PackedGte] = {}
        for clf in classifiers:
            clf.packed = forwards.setdefault(clf.spec.model, PackedGte(clf.loaded.model))
    elif mine is not None and before is None and facts.half and not unsupported:
        _once(engine, mine, "attention", choice.reason.removeprefix("auto: "))
    return Forward(choice, *_compile(engine, choice.mode == "packed", key))


def _compile(
    engine: Chooser, packed_mode: bool, key: budgets.BudgetKey | None
) -> tuple[compiling.CompileChoice, compiling.CompileCache | None]:
    """``inference.compile``'s choice (``key``: this kind of GPU's, None off CUDA);
    compiled, each packed forward gets the compiled kernels (compiled at their first
    call, in the self-check) and Inductor's cache is this job's own (``job_cache``)."""
    setting, cuda = engine.settings.compile, engine.device.type == "cuda"
    forwards = [c.packed for c in engine._classifiers if c.packed is not None]
    mine = key if setting == "auto" and forwards else None
    before = budgets.verdict(engine._budget_dir, mine, "compile") if mine is not None else None
    facts = compiling.CompileFacts(
        packed=packed_mode,
        cuda=cuda,
        triton=cuda and compiling.triton_installed(),
        activations=all(f.activation is not None for f in forwards),
        decided_before=before.reason if before is not None else None,
    )
    try:
        choice = compiling.choose(setting, facts)
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    if not choice.on:
        return choice, None
    cache = compiling.job_cache(engine._budget_dir, _compile_key(engine))
    if cache.note:
        log.warning("inference.compile: %s", cache.note)
    kernels = fused.compiled()
    for forward in forwards:
        forward.kernels = kernels
    return choice, cache


def _compile_key(engine: Chooser) -> compiling.CompileKey:
    """What this job's compiled kernels depend on (the run directory's artifact's key)."""
    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = "none"
    shapes = {c.packed.shape for c in engine._classifiers if c.packed is not None}
    return compiling.CompileKey(
        device=engine.device_name,
        dtype=engine.dtype_name,
        torch=str(torch.__version__),
        triton=triton,
        python=f"{sys.version_info.major}.{sys.version_info.minor}",
        models=tuple(sorted(shapes)),
    )


def _activate(choice: attention.Choice) -> attention.Choice:
    """Route torch's varlen flash calls to FlashAttention-3 when the choice asks for it
    (installed beforehand: nothing is installed at job time); where torch cannot, the
    job runs torch's own kernel, the reason said in the stats. The self-check before the
    first packed batch covers whichever runs."""
    if choice.flash != "FA3":
        return choice
    activate = getattr(torch.nn.attention, "activate_flash_attention_impl", None)
    try:
        if activate is None:
            raise RuntimeError(f"torch {torch.__version__} has no activate_flash_attention_impl")
        activate("FA3")
    except Exception as exc:  # noqa: BLE001 - any failure: torch's own kernel
        why = f"{choice.reason}; FA3 not activated ({type(exc).__name__}: {first_line(str(exc))})"
        return attention.Choice("packed", why)
    return choice


def active_flash() -> str | None:
    """The flash implementation torch's dispatcher runs now (None: its own, FA2-class)."""
    current = getattr(torch.nn.attention, "current_flash_attention_impl", None)
    try:
        return current() if current is not None else None
    except Exception:  # noqa: BLE001 - a figure, never a failure
        return None


#: Per verdict kind: the setting, what ``auto`` falls back to, and what later jobs do.
_FALLBACK = {
    "attention": ("inference.attention", "padded batches", "go padded at once"),
    "compile": ("inference.compile", "the eager packed forward", "do not compile"),
}


def _once(engine: Chooser, key: budgets.BudgetKey, kind: str, reason: str) -> None:
    """Record ``auto``'s ``kind`` verdict for this kind of GPU and say it: the one
    console line of a campaign's jobs on it (later ones read the record)."""
    at = datetime.now(UTC).isoformat(timespec="seconds")
    where = budgets.record_verdict(engine._budget_dir, key, kind, reason, at)
    setting, fallback, later = _FALLBACK[kind]
    kept = f" (recorded in {where}: later jobs on this kind of GPU {later})"
    log.warning(
        "%s auto on %s: %s: %s%s",
        setting,
        engine.device_name,
        fallback,
        reason,
        kept if where is not None else "",
    )


def check_packed(engine: Chooser, forward: Forward, prepared: Any) -> Forward:
    """The self-check (``classify/attention.py``), once per job before any packed batch:
    a few of the job's documents (one long) through both forwards, per distinct model; a
    compiled forward compiles here (``compile_s``, Inductor's cache hits and misses) and,
    passed, keeps its kernels for later jobs (``compiling.keep_artifact``). A compiled
    forward that fails is checked again eager, and kept so when that passes; a failure,
    or an exception, of the eager one turns the job to padded batches. Either is said on
    the console; with ``auto`` on CUDA a wrong result is recorded, so no later job of
    this kind of GPU repeats it. The forward as checked."""
    started = time.perf_counter()
    compiled = forward.compile.on
    counted = compiling.kernel_counts() if compiled else (0, 0)
    checks = _check_all(engine, prepared, compiled=compiled)
    if compiled:
        hits, misses = compiling.kernel_counts()
        kernels = (hits - counted[0], misses - counted[1])
        forward = replace(forward, compile_s=time.perf_counter() - started, kernels=kernels)
        if any(not c.passed for c in checks):
            failed = next(c for c in checks if not c.passed)
            forward = replace(forward, compile=_compiled_failed(engine, failed))
            checks = _check_all(engine, prepared, compiled=False)
        else:
            forward = replace(forward, cache=_kept(forward.cache))
    forward = replace(forward, self_checks=tuple(checks))
    failed = [c for c in checks if not c.passed]
    if not failed:
        return forward
    why = f"{failed[0].classifier}: {failed[0].line()}"
    for clf in engine._classifiers:
        clf.packed = None
    forward = replace(forward, attention=attention.Choice("padded", f"self-check failed ({why})"))
    if engine.settings.attention == "auto" and engine.device.type == "cuda":
        reason = f"the packed self-check failed ({why})"
        _once(engine, gpubudget.budget_key(engine), "attention", reason)
        return forward
    text = "inference.attention %s: the packed forward failed its self-check (%s): "
    log.warning(text + "this job runs padded batches", engine.settings.attention, why)
    return forward


def _kept(cache: compiling.CompileCache | None) -> compiling.CompileCache | None:
    """The job's compile cache once its kernels passed: packed for later jobs."""
    if cache is None:
        return None
    kept = compiling.keep_artifact(cache)
    if kept.note:
        log.warning("inference.compile: %s", kept.note)
    return kept


def _check_all(engine: Chooser, prepared: Any, *, compiled: bool) -> list[attention.SelfCheck]:
    """Each distinct model's self-check."""
    checks: dict[str, attention.SelfCheck] = {}
    for clf in engine._classifiers:
        if clf.packed is None or clf.spec.model in checks:
            continue
        checks[clf.spec.model] = _check_one(engine, clf, prepared, compiled=compiled)
    return list(checks.values())


def _compiled_failed(engine: Chooser, check: attention.SelfCheck) -> compiling.CompileChoice:
    """The compiled forward failed its self-check: the eager one from now on, said once.
    Where the node could not build it (``check.environment``) the line gives the cause
    and the fix, and nothing is recorded: the next job tries again. A wrong result or a
    graph that does not compile is a verdict (recorded per kind of GPU with ``auto`` on
    CUDA). The compile choice from now on."""
    for clf in engine._classifiers:
        if clf.packed is not None:
            clf.packed.kernels = fused.EAGER
    why = f"{check.classifier}: {check.line()}"
    setting = engine.settings.compile
    if check.environment:
        reason = f"the compiled forward could not be built here ({why}; {check.environment})"
        text = "inference.compile %s: %s: this job runs the eager packed forward; the next "
        log.warning(text + "job tries again", setting, reason)
        return compiling.CompileChoice(False, reason)
    reason = f"the compiled forward failed its self-check ({why})"
    key = _verdict_key(engine)
    if key is not None:
        _once(engine, key, "compile", reason)
    else:
        log.warning(
            "inference.compile %s: %s: this job runs the eager packed forward", setting, reason
        )
    return compiling.CompileChoice(False, reason)


def _verdict_key(engine: Chooser) -> budgets.BudgetKey | None:
    """Where ``auto``'s compile verdict is recorded: this kind of GPU's key (``auto`` on
    CUDA); None where a verdict is only said (``on``, the CPU)."""
    if engine.settings.compile == "auto" and engine.device.type == "cuda":
        return gpubudget.budget_key(engine)
    return None


def _check_one(engine: Chooser, clf: Any, prepared: Any, *, compiled: bool) -> attention.SelfCheck:
    """One model's self-check: its sample through the padded and the packed forward."""
    sample = attention.sample(prepared.streams[clf.key])
    rows = np.arange(len(sample.lengths))
    try:
        with torch.inference_mode():
            width = int(sample.lengths.max())
            ids, mask = collate(sample, rows, width, engine.dtype, engine.device)
            padded = engine._forward(clf.loaded.model, clf.key_mask_4d, ids, mask, hook=False)
            packed_logits = clf.packed.logits(pack(sample, rows, engine.device))
            pair = padded.cpu().numpy(), packed_logits.cpu().numpy()
        return attention.compare(clf.spec.name, *pair)
    except Exception as exc:  # noqa: BLE001 - any failure of the packed path means padded
        error = f"{type(exc).__name__}: {first_line(str(exc))}"
        fault = compiling.environment_fault(exc) if compiled else None
        return attention.SelfCheck(clf.spec.name, len(rows), error=error, environment=fault or "")
