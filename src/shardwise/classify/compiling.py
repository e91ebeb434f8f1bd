"""Whether a job's packed forward runs compiled (``inference.compile``), where Inductor
keeps what it compiles, and how a campaign's later jobs skip the compile.

Compiling fuses the elementwise work around each layer's GEMMs (``classify/fused.py``):
on a GPU about a fifth of the forward's time (docs/engine.md). It costs start-up: the
first call traces and compiles (about 27 s for the demo models on this project's CPU,
tens of seconds on a GPU), and every shard job is a fresh process.

One Inductor cache on a shared filesystem, written by a wave of jobs at once, is unsafe
(temp files named by pid and thread, ``flock`` locks, Triton's cache on NFS:
triton#11512, pytorch#173679). So each job compiles into a cache of its own on its node
(under ``$TMPDIR``, removed at exit), and the first job whose compiled forward passes its
self-check packs that cache into one artifact in the run directory,
``<run_dir>/budgets/compiled/<key>.tar``, written atomically and never replaced. A later
job of the same kind (device, dtype, torch, Triton, Python, model shapes) unpacks it into
its own cache before compiling: Inductor then finds every graph and kernel (hits, no
misses) and compiles nothing. An operator's own ``TORCHINDUCTOR_CACHE_DIR`` is used as it
is (no artifact read or written); the one Inductor sets itself on import (its per-user
default under the system temp directory) is not an operator's.

``auto`` compiles where it pays: packed batches on CUDA with Triton (Inductor's GPU
kernels) installed, every model's activation one with a fused form, and no earlier job
on this kind of GPU found the compiled forward wrong. ``on`` compiles wherever packed
batches run (the CPU too: how the tests check it); ``off`` never. The packed self-check
runs the compiled forward. Only a wrong result or a graph that fails to compile is a
verdict (recorded once per kind of GPU for ``auto`` on CUDA, ``run/budgets.py``); a
filesystem error, a missing C compiler or ``libcuda`` is said in one line with its cause
and fix, and the job runs eager while the next one tries again (:func:`environment_fault`).
"""

import atexit
import errno
import hashlib
import importlib.util
import io
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from shardwise.store.atomic import create_exclusive

MODES = ("auto", "on", "off")
#: The run directory's folder (beside the batch budgets) that keeps the artifacts.
CACHE_DIRECTORY = "compiled"
ARTIFACT_SUFFIX = ".tar"
_ENV = "TORCHINDUCTOR_CACHE_DIR"
#: The cache directories this module set for a job (never taken for an operator's).
_OURS: set[str] = set()


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


def operator_cache() -> str | None:
    """The operator's ``TORCHINDUCTOR_CACHE_DIR``, or None: unset, one this module set for
    a job, or the per-user default Inductor sets itself when it is imported."""
    chosen = os.environ.get(_ENV)
    if not chosen or chosen in _OURS:
        return None
    if Path(chosen).absolute() == Path(_inductor_default()).absolute():
        return None
    return chosen


def _inductor_default() -> str:
    """Inductor's own default cache directory (what it sets on import when none is set)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir  # noqa: PLC0415 - torch's

    return default_cache_dir()


@dataclass(frozen=True)
class CompileKey:
    """What compiled kernels depend on beyond the graph: the device (a GPU's name, or
    ``cpu``), the dtype, torch, Triton and Python, and each model's shape and activation.
    One artifact per key: another kind of GPU or set-up compiles (and keeps) its own."""

    device: str
    dtype: str
    torch: str
    triton: str
    python: str
    models: tuple[str, ...]

    def name(self) -> str:
        """The artifact's file name: a hash of every field."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16] + ARTIFACT_SUFFIX


@dataclass(frozen=True)
class CompileCache:
    """Where a job's Inductor keeps what it compiles (``directory``) and where it came
    from (``source``): ``artifact`` (unpacked from the run directory's ``artifact``),
    ``compiled`` (this job compiled it; ``artifact`` is where it is kept for later jobs
    once the self-check passes), ``operator`` (``TORCHINDUCTOR_CACHE_DIR`` as set).
    ``note``: why no artifact was read or written (a filesystem error), or ""."""

    directory: str
    source: str
    artifact: str | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """The stats' ``compile_cache`` entry."""
        return {**asdict(self), "note": self.note or None}


def job_cache(budget_dir: Path | None, key: CompileKey) -> CompileCache:
    """Point Inductor at a cache of this job's own, on this node (before the first
    compile), seeded from the run directory's artifact for ``key`` where there is one;
    the operator's ``TORCHINDUCTOR_CACHE_DIR`` is used as it is. A filesystem error
    reading the artifact is noted (the job compiles, nothing is decided)."""
    chosen = operator_cache()
    if chosen is not None:
        return CompileCache(chosen, "operator")
    local = tempfile.mkdtemp(prefix="shardwise-inductor-", dir=os.environ.get("TMPDIR"))
    atexit.register(shutil.rmtree, local, ignore_errors=True)
    _OURS.add(local)
    os.environ[_ENV] = local
    if budget_dir is None:
        return CompileCache(local, "compiled")
    artifact = Path(budget_dir) / CACHE_DIRECTORY / key.name()
    try:
        with tarfile.open(artifact) as tar:
            tar.extractall(local, filter="data")
    except FileNotFoundError:
        return CompileCache(local, "compiled", str(artifact))
    except (OSError, tarfile.TarError) as exc:
        note = f"the artifact {artifact} could not be read ({_cause(exc)}): this job "
        note += "compiles; remove it, and the next job that compiles keeps a new one"
        return CompileCache(local, "compiled", str(artifact), note)
    return CompileCache(local, "artifact", str(artifact))


def keep_artifact(cache: CompileCache) -> CompileCache:
    """After the compiled forward passed its self-check: pack this job's cache into the
    run directory's artifact, unless it came from one, is the operator's, or another job
    wrote it first (create-if-absent: never replaced). A filesystem error is noted."""
    if cache.source != "compiled" or cache.artifact is None or cache.note:
        return cache
    buffer = io.BytesIO()
    try:
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(cache.directory, arcname=".")
        create_exclusive(Path(cache.artifact), buffer.getvalue())
    except (OSError, tarfile.TarError) as exc:
        note = f"the artifact {cache.artifact} could not be written ({_cause(exc)}): later "
        note += "jobs compile too; make its folder writable"
        return replace(cache, note=note)
    return cache


def kernel_counts() -> tuple[int, int]:
    """Inductor's compiled-graph cache hits and misses so far in this process."""
    from torch._dynamo.utils import counters  # noqa: PLC0415 - only where a job compiles

    inductor = counters["inductor"]
    return int(inductor["fxgraph_cache_hit"]), int(inductor["fxgraph_cache_miss"])


def graphs_compiled() -> int:
    """How many graphs Dynamo compiled so far in this process (recompiles included)."""
    from torch._dynamo.utils import counters  # noqa: PLC0415 - only where a job compiles

    return int(counters["stats"]["unique_graphs"])


#: Causes of a compile failure that say nothing of the forward: (what the exception
#: chain's text holds, the cause in words, the fix).
_ENVIRONMENT = (
    (
        ("C compiler", "CC environment variable", "InvalidCxxCompiler", "gcc: not found"),
        "no C compiler",
        "install one on the nodes (Debian: apt install gcc) or set CC, "
        "or set inference.compile: off",
    ),
    (
        ("libcuda",),
        "Triton cannot find libcuda.so",
        "set TRITON_LIBCUDA_PATH to the directory holding libcuda.so.1, "
        "or set inference.compile: off",
    ),
    (
        ("Python.h",),
        "no Python headers for Inductor's C++ code",
        "install them on the nodes (Debian: python3-dev), or set inference.compile: off",
    ),
)


def environment_fault(exc: BaseException) -> str | None:
    """The cause and fix of a compile failure that comes from the node, not the forward:
    a filesystem error (``EBUSY``, ``ESTALE``, ``ENOENT``, a quota) anywhere in the
    exception's chain, a missing C compiler, ``libcuda`` or Python headers. None: the
    failure is the compiled forward's own (a verdict)."""
    chain = _chain(exc)
    text = " ".join(f"{type(e).__name__}: {e}" for e in chain)
    for needles, cause, fix in _ENVIRONMENT:
        if any(needle in text for needle in needles):
            return f"{cause}: {fix}"
    failed = next((e for e in chain if isinstance(e, OSError)), None)
    if failed is not None:
        where = f"the compile cache {os.environ.get(_ENV, '')}".rstrip()
        return (
            f"a filesystem error in {where} ({_cause(failed)}): free space or quota in "
            "$TMPDIR, or point TORCHINDUCTOR_CACHE_DIR at a writable local directory"
        )
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception behind it (causes, contexts, a backend's inner one)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        inner = getattr(current, "inner_exception", None)
        todo += [current.__cause__, current.__context__]
        todo += [inner] if isinstance(inner, BaseException) else []
    return seen


def _cause(exc: BaseException) -> str:
    """An exception in a few words: the errno's name and text where it has one."""
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{name}: {exc.strerror}" + (f": {exc.filename}" if exc.filename else "")
    return f"{type(exc).__name__}: {exc}"
