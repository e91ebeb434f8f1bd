"""``inference.compile``'s choice on a fake device description (no GPU needed), and where
the compiled kernels are kept."""

from __future__ import annotations

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


def test_the_cache_is_the_run_directorys_unless_the_operator_chose_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compiling.share_cache(tmp_path / "budgets") == str(tmp_path / "mine")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    assert compiling.share_cache(None) == "this node's (no run directory)"
    where = compiling.share_cache(tmp_path / "budgets")
    assert where == str((tmp_path / "budgets" / "compiled").resolve()) and Path(where).is_dir()
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    (tmp_path / "file").write_text("")
    assert "cannot be made" in compiling.share_cache(tmp_path / "file")
