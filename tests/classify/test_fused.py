"""The compiled packed forward (``inference.compile``) against the padded one on the CPU:
the same labels, scores within 1e-4, documents from one token to past 4,096; its
kernels kept in the run directory; a compiled forward that fails or is wrong sends the
job to the eager packed forward with one line."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from textsynth import synthetic_corpus

from shardwise.classify import compiling, forwardchoice, fused
from shardwise.classify.engine import ClassifierSpec, Engine
from shardwise.config import InferenceSettings
from shardwise.demo.tinymodels import build_weborganizer_demo_models
from shardwise.run import budgets


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    texts, urls = synthetic_corpus(40, seed=9, median_words=30, max_words=600, tail_fraction=0.1)
    long_text = " ".join(texts * 40)  # one document far past 4,096 tokens (cut at 8,192)
    return [*texts, long_text, "a"], [*urls, "https://long.example/", "https://a.example/"]


@pytest.fixture(scope="module")
def model_paths(tmp_path_factory: pytest.TempPathFactory, corpus) -> dict[str, Path]:
    texts, urls = corpus
    return build_weborganizer_demo_models(tmp_path_factory.mktemp("models"), texts[:40] + urls)


def _engine(model_paths, cache_root: Path, attention: str, compile_: str, **kw) -> Engine:
    specs = [
        ClassifierSpec(name, str(path), "text" if name.endswith("nourl") else "url_text")
        for name, path in model_paths.items()
    ]
    settings = InferenceSettings(
        max_length=8192, batch_tokens=16384, attention=attention, compile=compile_
    )
    return Engine.load(specs, settings, cache_root=cache_root, **kw)


@pytest.fixture(scope="module")
def padded(model_paths, corpus, tmp_path_factory):
    engine = _engine(model_paths, tmp_path_factory.mktemp("cache"), "padded", "off")
    return engine.infer(engine.prepare(*corpus))


def _probabilities(logits: np.ndarray) -> np.ndarray:
    return torch.from_numpy(logits).double().softmax(-1).numpy()


@pytest.fixture
def inductor_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No operator-set Inductor cache (the job's own is undone after the test), and the
    node's temp directory this test's own."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "unset")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    (tmp_path / "node").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node"))


def test_the_compiled_forward_labels_as_the_padded_one(
    model_paths, corpus, padded, tmp_path, inductor_cache
) -> None:
    budgets = tmp_path / "run" / "budgets"
    graphs = compiling.graphs_compiled()
    engine = _engine(model_paths, tmp_path / "cache", "packed", "on", budget_dir=budgets)
    prepared = engine.prepare(*corpus)
    assert max(int(s.lengths.max()) for s in prepared.streams.values()) > 4096
    got = engine.infer(prepared)
    stats = got.stats
    assert stats["compile"] is True and stats["compile_reason"] == "inference.compile: on"
    assert [c["passed"] for c in stats["attention_self_check"]] == [True] * 4
    assert stats["compile_s"] > 0 and stats["attention"] == "packed"
    for name, logits in got.logits.items():
        want = padded.logits[name]
        assert np.abs(_probabilities(logits) - _probabilities(want)).max() < 1e-4, name
        assert (logits.argmax(1) == want.argmax(1)).all(), name
    # compiled in a cache on this node, then kept in the run directory for the next job
    assert Path(stats["compile_cache"]).parent == tmp_path / "node"
    assert stats["compile_source"] == "compiled" and stats["compile_kernels_missed"] > 0
    (artifact,) = (budgets / "compiled").iterdir()
    assert stats["compile_artifact"] == str(artifact) and artifact.suffix == ".tar"
    # only the token count is dynamic: one graph per function serves every layer of all
    # four models and every batch size (no recompile)
    assert stats["compile_graphs"] - graphs == 2


def _broken(qkv_rope=fused.qkv_rope, layer_tail=fused.layer_tail) -> fused.Kernels:
    return fused.Kernels(qkv_rope, layer_tail, compiled=True)


def _fails(*args, **kwargs):
    raise RuntimeError("injected: Inductor could not compile this graph")


@pytest.mark.parametrize(
    ("kernels", "said"),
    [
        (_broken(qkv_rope=_fails), "raised RuntimeError: injected: Inductor could not compile"),
        (_broken(layer_tail=lambda *a: fused.layer_tail(*a).roll(1, 0)), "label(s) differ"),
    ],
    ids=["compile error", "wrong result"],
)
def test_a_compiled_forward_that_fails_its_self_check_runs_eager_with_one_line(
    model_paths, corpus, padded, tmp_path, monkeypatch, caplog, kernels, said
) -> None:
    monkeypatch.setattr(fused, "compiled", lambda: kernels)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    engine = _engine(model_paths, tmp_path / "cache", "packed", "on")
    with caplog.at_level(logging.WARNING, logger="shardwise.classify.engine"):
        got = engine.infer(engine.prepare(*corpus))
        again = engine.infer(engine.prepare(*corpus))  # once per job: no second line
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0].startswith("inference.compile on: the compiled forward failed its self-check")
    assert said in lines[0] and lines[0].endswith("this job runs the eager packed forward")
    for stats in (got.stats, again.stats):
        assert stats["compile"] is False and stats["attention"] == "packed"
        assert stats["compile_reason"].startswith("the compiled forward failed its self-check")
        assert [c["passed"] for c in stats["attention_self_check"]] == [True] * 4
    for name, logits in got.logits.items():
        assert (logits.argmax(1) == padded.logits[name].argmax(1)).all(), name


def test_auto_and_off_do_not_compile_on_the_cpu(model_paths, tmp_path) -> None:
    for setting, why in [("auto", "auto: not on CUDA"), ("off", "inference.compile: off")]:
        engine = _engine(model_paths, tmp_path / "cache", "packed", setting)
        assert not engine.compile.on and engine.compile.reason.startswith(why)
        assert all(c.packed.kernels is fused.EAGER for c in engine._classifiers)
    padded_engine = _engine(model_paths, tmp_path / "cache", "padded", "on")
    assert padded_engine.compile.reason.startswith("batches run padded")


KEY = budgets.BudgetKey(
    gpu="NVIDIA H100", memory=80 << 30, dtype="bfloat16", torch="2.11.0", max_length=8192,
    models=(1, 2),
)  # fmt: skip


def _busy(*args, **kwargs):
    try:
        raise OSError(errno.EBUSY, "Device or resource busy", "/nfs/inductor/x.lock")
    except OSError as exc:
        raise RuntimeError("backend='inductor' raised: OSError") from exc


@pytest.mark.parametrize(
    ("kernels", "verdict", "said"),
    [
        (_broken(qkv_rope=_busy), False, "could not be built here"),
        (_broken(layer_tail=lambda *a: fused.layer_tail(*a).roll(1, 0)), True, "differ"),
    ],
    ids=["filesystem error", "wrong result"],
)
def test_only_a_wrong_result_is_recorded_as_this_gpus_verdict(
    model_paths, corpus, tmp_path, monkeypatch, caplog, kernels, verdict, said
) -> None:
    """With ``auto`` on CUDA (its verdict key, here on the CPU): a wrong result is
    recorded for later jobs; a filesystem error is said with its cause and fix, and the
    next job tries again."""
    monkeypatch.setattr(fused, "compiled", lambda: kernels)
    monkeypatch.setattr(forwardchoice, "_verdict_key", lambda engine: KEY)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    budget_dir = tmp_path / "budgets"
    engine = _engine(model_paths, tmp_path / "cache", "packed", "on", budget_dir=budget_dir)
    with caplog.at_level(logging.WARNING, logger="shardwise.classify.engine"):
        stats = engine.infer(engine.prepare(*corpus)).stats
    (line,) = [r.getMessage() for r in caplog.records]
    recorded = budgets.verdict(budget_dir, KEY, "compile")
    assert (recorded is not None) is verdict and said in stats["compile_reason"]
    assert stats["compile"] is False and stats["attention"] == "packed"
    if not verdict:
        assert "EBUSY" in line and "TORCHINDUCTOR_CACHE_DIR" in line
        assert line.endswith("this job runs the eager packed forward; the next job tries again")
