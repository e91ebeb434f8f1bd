"""Whether a job's packed forward runs compiled (``inference.compile``), and where the
compiled kernels are kept so that only the first job of a campaign pays for them.

Compiling fuses the elementwise work around each layer's GEMMs (``classify/fused.py``):
on a GPU about a fifth of the forward's time (docs/engine.md). It costs start-up: the
first call traces and compiles (about 27 s for the demo models on this project's CPU,
tens of seconds on a GPU), and every shard job is a fresh process. Inductor keeps what it
compiled in ``TORCHINDUCTOR_CACHE_DIR``, keyed by the graph, the device and the versions;
pointed at the run directory (shared by the jobs, on every node), a later job reads the
kernels instead of compiling them (``bench/startup.py`` measures cold against warm).

``auto`` compiles where it pays: packed batches on CUDA with Triton (Inductor's GPU
kernels) installed, every model's activation one with a fused form, and no earlier job
on this kind of GPU found the compiled forward wrong. ``on`` compiles wherever packed
batches run (the CPU too: how the tests check it); ``off`` never. The packed self-check
runs the compiled forward: a failure, or a compile error, means the eager packed forward
for the rest of the job, said in one line and, for ``auto`` on CUDA, recorded once per
kind of GPU (``run/budgets.py``).
"""

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

MODES = ("auto", "on", "off")
#: The run directory's folder (beside the batch budgets) that keeps Inductor's kernels.
CACHE_DIRECTORY = "compiled"
_ENV = "TORCHINDUCTOR_CACHE_DIR"


@dataclass(frozen=True)
class CompileFacts:
    """What decides compiling: the forward chosen (packed or not), CUDA, whether Triton
    imports, whether every model's activation has a fused form, and the verdict an
    earlier job recorded for this kind of GPU (None: none)."""

    packed: bool
    cuda: bool
    triton: bool
    activations: bool
    decided_before: str | None = None


@dataclass(frozen=True)
class CompileChoice:
    """Compiled or eager, and why (the stats' ``compile`` and ``compile_reason``)."""

    on: bool
    reason: str


def choose(setting: str, facts: CompileFacts) -> CompileChoice:
    """The choice for ``inference.compile`` = ``setting`` (ValueError for another value)."""
    if setting not in MODES:
        raise ValueError(f"inference.compile {setting!r}: expected one of {list(MODES)}")
    why = _why_eager(setting, facts)
    if why is not None:
        return CompileChoice(False, why)
    return CompileChoice(True, "inference.compile: on" if setting == "on" else _AUTO_ON)


_AUTO_ON = "auto: packed batches on CUDA"


def _why_eager(setting: str, facts: CompileFacts) -> str | None:
    """Why the packed forward runs eager under ``setting`` (None: it runs compiled)."""
    reasons = [
        (setting == "off", "inference.compile: off"),
        (not facts.packed, "batches run padded (compiling fuses the packed forward)"),
        (
            not facts.activations,
            "a model's activation has no fused form (classify/fused.py ACTIVATIONS)",
        ),
    ]
    if setting == "auto":
        reasons += [
            (
                not facts.cuda,
                "auto: not on CUDA (compiling costs tens of seconds per job; the CPU's "
                "packed forward is the reference one)",
            ),
            (not facts.triton, "auto: Triton is not installed (Inductor's GPU kernels)"),
            (facts.decided_before is not None, f"auto: {facts.decided_before}"),
        ]
    return next((why for applies, why in reasons if applies), None)


def triton_installed() -> bool:
    """Whether Triton imports here (without importing it: a job that does not compile
    pays nothing)."""
    return importlib.util.find_spec("triton") is not None


def share_cache(budget_dir: Path | None) -> str:
    """Point Inductor's cache at the run directory's :data:`CACHE_DIRECTORY`, unless the
    operator chose one (``TORCHINDUCTOR_CACHE_DIR`` set) or there is no run directory;
    the directory in use, or why none is shared."""
    chosen = os.environ.get(_ENV)
    if chosen:
        return chosen
    if budget_dir is None:
        return "this node's (no run directory)"
    target = Path(budget_dir) / CACHE_DIRECTORY
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"this node's ({target} cannot be made: {exc.strerror})"
    os.environ[_ENV] = str(target.resolve())
    return os.environ[_ENV]
