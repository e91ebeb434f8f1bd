"""The packed forward against the padded one (float32, CPU, the reference attention), the
choice of forward, and the self-check that sends a job back to padded batches."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from textsynth import synthetic_corpus
from transformers import GteConfig, GteForSequenceClassification

from shardwise.classify import attention
from shardwise.classify.device import collate
from shardwise.classify.engine import ClassifierSpec, Engine
from shardwise.classify.models import load_classifier
from shardwise.classify.packed import PackedGte, pack
from shardwise.classify.tokenization import TokenStream
from shardwise.config import InferenceSettings
from shardwise.demo.tinymodels import build_weborganizer_demo_models
from shardwise.errors import ModelError

CPU = torch.device("cpu")
#: From 1 token to the WebOrganizer models' 8,192, in the batch shapes that differ.
BATCHES = {
    "one document": [8192],
    "one token": [1],
    "equal lengths": [64, 64, 64, 64],
    "very different lengths": [8192, 3000, 511, 512, 77, 2, 1],
    "runs of equal lengths": [900, 900, 40, 40, 40, 3, 3, 1],
}


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    return synthetic_corpus(60, seed=5, median_words=40, max_words=900, tail_fraction=0.1)


@pytest.fixture(scope="module")
def model_paths(tmp_path_factory: pytest.TempPathFactory, corpus) -> dict[str, Path]:
    texts, urls = corpus
    return build_weborganizer_demo_models(tmp_path_factory.mktemp("models"), texts + urls)


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _stream(lengths: list[int], vocab: int, seed: int = 0) -> TokenStream:
    rng = np.random.default_rng(seed)
    sizes = np.array(lengths, dtype=np.int32)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    ids = rng.integers(5, vocab, int(sizes.sum())).astype(np.int32)
    return TokenStream(ids=ids, offsets=offsets, lengths=sizes, pad_id=0)


def _both(model: torch.nn.Module, stream: TokenStream) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities of the padded and the packed forward for the whole stream."""
    rows = np.arange(len(stream.lengths))
    with torch.inference_mode():
        ids, mask = collate(stream, rows, int(stream.lengths.max()), torch.float32, CPU)
        padded = model(input_ids=ids, attention_mask=mask).logits.float()
        packed = PackedGte(model).logits(pack(stream, rows, CPU))
    return padded.softmax(-1).numpy(), packed.softmax(-1).numpy()


@pytest.mark.parametrize("shape", list(BATCHES))
def test_packed_equals_padded_on_the_demo_models(model_paths, cache_root, shape) -> None:
    for name, path in model_paths.items():
        model = load_classifier(str(path), cache_root=cache_root).model
        stream = _stream(BATCHES[shape], model.config.vocab_size, seed=len(name))
        padded, packed = _both(model, stream)
        assert np.abs(padded - packed).max() < 1e-4, (name, shape)
        assert (padded.argmax(1) == packed.argmax(1)).all(), (name, shape)


def test_packed_equals_padded_with_token_types_and_another_activation() -> None:
    """A GTE with token type embeddings (gte-large's kind), three layers, another activation."""
    config = GteConfig(
        vocab_size=300, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=96, type_vocab_size=2, hidden_act="silu", num_labels=5,
        max_position_embeddings=8192, initializer_range=0.2,
    )  # fmt: skip
    torch.manual_seed(3)
    model = GteForSequenceClassification(config).eval()
    padded, packed = _both(model, _stream(BATCHES["very different lengths"], 300))
    assert np.abs(padded - packed).max() < 1e-4
    assert (padded.argmax(1) == packed.argmax(1)).all()


def test_fusing_shares_the_weights_with_the_padded_forward(model_paths, cache_root) -> None:
    model = load_classifier(str(model_paths["topic"]), cache_root=cache_root).model
    before = _stream([30, 7], model.config.vocab_size)
    padded_before, _ = _both(model, before)  # _both fused the model once already
    packed = PackedGte(model)
    attn = model.gte.layers[0].self_attn
    assert attn.q_proj.weight.data_ptr() == packed.qkv[0][0].data_ptr()
    assert attn.k_proj.weight.data_ptr() == packed.qkv[0][0][attn.q_proj.out_features :].data_ptr()
    padded_after, _ = _both(model, before)
    np.testing.assert_array_equal(padded_before, padded_after)


@pytest.mark.parametrize(
    ("setting", "cuda", "half", "unsupported", "mode"),
    [
        ("auto", True, True, [], "packed"),
        ("auto", False, False, [], "padded"),
        ("auto", True, False, [], "padded"),
        ("auto", True, True, ["topic"], "padded"),
        ("padded", True, True, [], "padded"),
        ("packed", False, False, [], "packed"),
    ],
)
def test_the_choice_of_forward(setting, cuda, half, unsupported, mode) -> None:
    device = attention.DeviceFacts(cuda=cuda, half=half, capability=(9, 0) if cuda else None)
    choice = attention.choose(setting, device, unsupported)
    assert choice.mode == mode and choice.reason


H100 = attention.DeviceFacts(cuda=True, half=True, capability=(9, 0), torch_version="2.13.0")


@pytest.mark.parametrize(
    ("device", "said"),
    [
        (replace(H100, varlen=False, torch_version="2.8.0"),
         "auto: torch 2.8.0 has no torch.nn.attention.varlen (2.10+), so packed batches would "
         "run the slow reference attention"),
        (replace(H100, capability=(7, 0)),
         "auto: compute capability 7.0: the varlen flash kernel needs 8.0 (Ampere+)"),
        (replace(H100, half=False), "auto: float32 (the varlen kernel needs half precision)"),
        (replace(H100, decided_before="the packed self-check failed on NVIDIA H100 before"),
         "auto: the packed self-check failed on NVIDIA H100 before"),
    ],
)  # fmt: skip
def test_auto_is_padded_where_the_flash_kernel_cannot_run_with_the_reason(device, said) -> None:
    assert attention.choose("auto", device, []) == attention.Choice("padded", said)
    assert attention.choose("packed", device, []).mode == "packed"  # asked for: it runs


def test_auto_is_packed_on_a_gpu_whose_kernel_runs_with_fa3_only_where_it_is() -> None:
    assert attention.choose("auto", H100, []) == attention.Choice(
        "packed", "auto: CUDA in half precision"
    )  # no FA3 installed: torch's own kernel
    fa3 = attention.choose("auto", replace(H100, fa3=True), [])
    assert (fa3.mode, fa3.flash) == ("packed", "FA3") and "FlashAttention-3" in fa3.reason
    a100 = attention.choose("auto", replace(H100, capability=(8, 0), fa3=True), [])
    assert (a100.mode, a100.flash) == ("packed", "")  # FA3 is Hopper's
    old = replace(H100, fa3=True, varlen=False)
    assert attention.choose("auto", old, []).mode == "padded"  # FA3 rides on varlen_attn


def test_the_self_check_has_one_long_row() -> None:
    lengths = np.array([40, 9000, 700, 12], np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    stream = TokenStream(
        ids=np.arange(offsets[-1], dtype=np.int32), offsets=offsets, lengths=lengths, pad_id=0
    )
    got = attention.sample(stream)
    assert got.lengths.tolist() == [4096, 512, 512, 40, 12]  # the longest twice: long, then cut
    assert got.ids[:4096].tolist() == list(range(40, 40 + 4096))


def test_packed_refuses_a_model_that_is_not_gte() -> None:
    device = attention.DeviceFacts(cuda=False, half=False)
    with pytest.raises(ValueError, match=r"classifier\(s\) mine are not GTE.*use auto or padded"):
        attention.choose("packed", device, ["mine"])
    with pytest.raises(ValueError, match="expected one of"):
        attention.choose("flash", device, [])


def test_the_self_check_compares_labels_outside_near_ties() -> None:
    padded = np.log(np.array([[0.7, 0.2, 0.1], [0.41, 0.40, 0.19]]))
    swapped = np.log(np.array([[0.7, 0.2, 0.1], [0.40, 0.41, 0.19]]))  # a near tie flips
    assert attention.compare("c", padded, swapped).passed
    wrong = np.log(np.array([[0.2, 0.7, 0.1], [0.41, 0.40, 0.19]]))
    check = attention.compare("c", padded, wrong)
    assert not check.passed and check.label_diffs == 1
    assert "1 label(s) differ" in check.line()
    assert not attention.compare("c", padded, padded + np.array([0, 1, 0])).passed  # probs moved


def _engine(model_paths, cache_root, mode: str, **kwargs) -> Engine:
    specs = [
        ClassifierSpec(name, str(path), "text" if name.endswith("nourl") else "url_text")
        for name, path in model_paths.items()
    ]
    settings = InferenceSettings(max_length=1024, batch_tokens=4096, attention=mode, probs=True)
    return Engine.load(specs, settings, cache_root=cache_root, **kwargs)


@pytest.fixture(scope="module")
def padded_run(model_paths, cache_root, corpus):
    engine = _engine(model_paths, cache_root, "padded")
    return engine.run(engine.prepare(*corpus))


def test_a_packed_job_labels_as_a_padded_one(model_paths, cache_root, corpus, padded_run) -> None:
    engine = _engine(model_paths, cache_root, "packed")
    labels = engine.run(engine.prepare(*corpus))
    stats = labels.stats
    assert stats["attention"] == "packed" and stats["attention_kernel_packed"] == "reference"
    assert [c["passed"] for c in stats["attention_self_check"]] == [True] * 4
    assert stats["pad_efficiency"] == 1.0 and padded_run.stats["pad_efficiency"] < 1.0
    assert stats["batches"] < padded_run.stats["batches"]  # real tokens fill a packed batch
    for name in engine.labels:
        got = labels.columns[f"{name}_probs"].to_numpy(zero_copy_only=False)
        want = padded_run.columns[f"{name}_probs"].to_numpy(zero_copy_only=False)
        assert np.abs(np.stack(got) - np.stack(want)).max() < 1e-3  # float16 columns
        assert labels.columns[f"{name}_label_id"].equals(padded_run.columns[f"{name}_label_id"])


def test_a_failing_packed_forward_sends_the_job_to_padded_batches(
    model_paths, cache_root, corpus, padded_run, monkeypatch, caplog
) -> None:
    def broken(self, batch):
        raise RuntimeError("injected: no kernel for this shape")

    monkeypatch.setattr(PackedGte, "logits", broken)
    engine = _engine(model_paths, cache_root, "packed")
    with caplog.at_level(logging.WARNING, logger="shardwise.classify.engine"):
        labels = engine.run(engine.prepare(*corpus))
    lines = [r.getMessage() for r in caplog.records if "self-check" in r.getMessage()]
    assert len(lines) == 1
    assert (
        "failed its self-check (topic: the packed forward raised RuntimeError: injected"
        in (lines[0])
    )
    assert lines[0].endswith("this job runs padded batches")
    assert labels.stats["attention"] == "padded"
    assert labels.stats["attention_reason"].startswith("self-check failed")
    for name in engine.labels:
        assert labels.columns[f"{name}_label_id"].equals(padded_run.columns[f"{name}_label_id"])
    again = engine.run(engine.prepare(*corpus))  # once per job: no second check, no second line
    assert again.stats["attention"] == "padded"
    assert len([r for r in caplog.records if "self-check" in r.getMessage()]) == 1


def test_a_wrong_packed_forward_is_caught_by_the_self_check(
    model_paths, cache_root, corpus, monkeypatch, caplog
) -> None:
    right = PackedGte.logits
    monkeypatch.setattr(PackedGte, "logits", lambda self, batch: right(self, batch).roll(1, 1))
    engine = _engine(model_paths, cache_root, "packed")
    with caplog.at_level(logging.WARNING, logger="shardwise.classify.engine"):
        labels = engine.run(engine.prepare(*corpus))
    assert labels.stats["attention"] == "padded"
    assert any("label(s) differ" in r.getMessage() for r in caplog.records)


def test_packed_on_a_model_that_is_not_gte_is_refused(model_paths, cache_root, monkeypatch):
    monkeypatch.setattr("shardwise.classify.forwardchoice.supports", lambda model: False)
    with pytest.raises(ModelError, match="inference.attention packed: classifier"):
        _engine(model_paths, cache_root, "packed")
    assert _engine(model_paths, cache_root, "auto").attention.mode == "padded"
