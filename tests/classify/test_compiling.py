"""``inference.compile``'s choice on a fake device description (no GPU needed), and where
the compiled kernels are kept."""

from __future__ import annotations

import dataclasses
import errno
import os
from pathlib import Path

import pytest

from shardwise.classify import compiling
from shardwise.classify.compiling import CompileFacts

GPU = CompileFacts(packed=True, cuda=True, triton=True, activations=True)


@pytest.mark.parametrize(
    ("setting", "facts", "on", "why"),
    [
        ("auto", GPU, True, "auto: packed batches on CUDA"),
        ("auto", CompileFacts(True, False, False, True), False, "auto: not on CUDA"),
        ("auto", CompileFacts(True, True, False, True), False, "auto: Triton is not installed"),
        ("auto", CompileFacts(False, True, True, True), False, "batches run padded"),
        ("auto", CompileFacts(True, True, True, False), False, "a model's activation"),
        (
            "auto",
            CompileFacts(True, True, True, True, decided_before="the compiled forward failed"),
            False,
            "auto: the compiled forward failed",
        ),
        ("on", CompileFacts(True, False, False, True), True, "inference.compile: on"),
        ("on", CompileFacts(False, False, False, True), False, "batches run padded"),
        ("off", GPU, False, "inference.compile: off"),
    ],
    ids=[
        "cuda",
        "cpu",
        "no triton",
        "padded",
        "activation",
        "compile failed before",
        "on cpu",
        "on padded",
        "off",
    ],
)
def test_the_choice(setting: str, facts: CompileFacts, on: bool, why: str) -> None:
    choice = compiling.choose(setting, facts)
    assert choice.on is on and choice.reason.startswith(why)


def test_another_setting_is_refused() -> None:
    with pytest.raises(ValueError, match=r"inference.compile 'yes': expected one of \['auto'"):
        compiling.choose("yes", GPU)


KEY = compiling.CompileKey("NVIDIA H100", "bfloat16", "2.11.0", "3.6.0", "3.12", ("768/12",))


@pytest.fixture
def no_operator_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No TORCHINDUCTOR_CACHE_DIR of the operator's; job caches under this test's TMPDIR."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "unset")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    (tmp_path / "node").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node"))


def test_the_operators_cache_is_used_as_set_and_inductors_own_default_is_not_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_operator_cache: None
) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    cache = compiling.job_cache(tmp_path / "budgets", KEY)
    assert cache == compiling.CompileCache(str(tmp_path / "mine"), "operator")
    assert compiling.keep_artifact(cache) == cache  # nothing packed from an operator's cache
    import torch._inductor.config  # noqa: F401 - sets Inductor's per-user default itself
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    assert compiling.operator_cache() is None


def test_a_job_compiles_into_its_own_cache_and_the_first_keeps_it_for_the_next(
    tmp_path: Path, no_operator_cache: None
) -> None:
    budgets = tmp_path / "run" / "budgets"
    first = compiling.job_cache(budgets, KEY)
    artifact = budgets / "compiled" / KEY.name()
    assert first == compiling.CompileCache(first.directory, "compiled", str(artifact))
    assert Path(first.directory).parent == tmp_path / "node"  # on the node, not the run dir
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == first.directory
    assert compiling.operator_cache() is None  # the job's own, never taken for an operator's
    (Path(first.directory) / "fxgraph").mkdir()
    (Path(first.directory) / "fxgraph" / "entry").write_text("kernel")
    assert compiling.keep_artifact(first) == first and artifact.is_file()
    kept = artifact.read_bytes()
    second = compiling.job_cache(budgets, KEY)
    assert second == compiling.CompileCache(second.directory, "artifact", str(artifact))
    assert second.directory != first.directory
    assert (Path(second.directory) / "fxgraph" / "entry").read_text() == "kernel"
    # a third job that compiled too (a wave) finds it kept: never replaced
    (Path(first.directory) / "fxgraph" / "entry").write_text("another")
    assert compiling.keep_artifact(first) == first and artifact.read_bytes() == kept
    other = compiling.CompileKey("NVIDIA A100", *dataclasses.astuple(KEY)[1:])
    assert compiling.job_cache(budgets, other).source == "compiled"


def test_an_artifact_that_cannot_be_read_or_written_is_noted_and_the_job_compiles(
    tmp_path: Path, no_operator_cache: None
) -> None:
    budgets = tmp_path / "budgets"
    (budgets / "compiled").mkdir(parents=True)
    (budgets / "compiled" / KEY.name()).write_bytes(b"not a tar")
    damaged = compiling.job_cache(budgets, KEY)
    assert damaged.source == "compiled" and "could not be read" in damaged.note
    assert compiling.keep_artifact(damaged) == damaged  # a damaged one is left for a person
    (budgets / "compiled" / KEY.name()).unlink()
    (budgets / "compiled").chmod(0o500)
    try:
        cache = compiling.job_cache(budgets, KEY)
        kept = compiling.keep_artifact(cache)
    finally:
        (budgets / "compiled").chmod(0o700)
    if os.geteuid() != 0:  # root writes anyway
        assert kept.note.startswith(f"the artifact {cache.artifact} could not be written (EACCES")
    alone = compiling.job_cache(None, KEY)  # no run directory: nothing read or kept
    assert alone == compiling.CompileCache(alone.directory, "compiled")
    assert compiling.keep_artifact(alone) == alone


class _BackendFailed(RuntimeError):
    """Shaped like Dynamo's BackendCompilerFailed: the backend's error as inner_exception."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__(f"backend='inductor' raised:\n{type(inner).__name__}: {inner}")
        self.inner_exception = inner


def _raised_from(inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise _BackendFailed(exc) from exc
    except _BackendFailed as outer:
        return outer


@pytest.mark.parametrize(
    ("exc", "cause"),
    [
        (_raised_from(OSError(errno.EBUSY, "Device or resource busy", "/nfs/x.lock")), "EBUSY"),
        (_raised_from(OSError(errno.ESTALE, "Stale file handle")), "ESTALE"),
        (_raised_from(FileNotFoundError(errno.ENOENT, "No such file", "/tmp/k.so")), "ENOENT"),
        (_raised_from(OSError(errno.EDQUOT, "Disk quota exceeded")), "EDQUOT"),
        (_raised_from(RuntimeError("Failed to find C compiler. Please specify via CC")), "no C"),
        (_raised_from(AssertionError("libcuda.so cannot found!")), "libcuda"),
    ],
    ids=["EBUSY", "ESTALE", "ENOENT", "quota", "no compiler", "no libcuda"],
)
def test_a_failure_of_the_node_is_named_with_its_cause_and_fix(
    exc: BaseException, cause: str
) -> None:
    said = compiling.environment_fault(exc)
    assert said is not None and cause in said
    assert "TORCHINDUCTOR_CACHE_DIR" in said or "inference.compile: off" in said


def test_a_failure_of_the_graph_is_not_the_nodes() -> None:
    wrong = _raised_from(RuntimeError("Unsupported: call_function aten.foo"))
    assert compiling.environment_fault(wrong) is None
