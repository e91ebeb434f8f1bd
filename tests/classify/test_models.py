"""The loader: "new"-format rewrite gives the native model's logits; errors name the model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from textsynth import synthetic_corpus

from shardwise.classify.models import load_classifier, rewrite_new_config, tokenizer_hash
from shardwise.demo.tinymodels import (
    build_tiny_gte_classifier,
    build_wordpiece_tokenizer,
)
from shardwise.errors import ModelError

LABELS = ["zeta", "alpha", "mu", "beta", "omega"]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    texts, urls = synthetic_corpus(150, seed=4, median_words=40)
    out = tmp_path_factory.mktemp("tok")
    build_wordpiece_tokenizer(texts + urls, out, vocab_size=800)
    return out


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_rewrite_new_config_generalises_ntk() -> None:
    config = {
        "model_type": "new",
        "architectures": ["NewForSequenceClassification"],
        "auto_map": {"AutoConfig": "x--y.NewConfig"},
        "hidden_size": 768,
        "num_attention_heads": 12,
        "rope_theta": 500000,
        "rope_scaling": {"type": "ntk", "factor": 2.0},
        "pack_qkv": True,
        "id2label": {"0": "a"},
    }
    out = rewrite_new_config(config)
    assert out["model_type"] == "gte"
    assert out["architectures"] == ["GteForSequenceClassification"]
    assert "rope_scaling" not in out and "auto_map" not in out and "rope_theta" not in out
    assert out["rope_parameters"]["rope_type"] == "linear"
    assert out["rope_parameters"]["rope_theta"] == 1_000_000.0
    assert math.isclose(out["rope_parameters"]["factor"], 2 ** (2 / 64))
    assert out["id2label"] == {"0": "a"}
    assert config["model_type"] == "new"  # input untouched


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("rope_scaling", {"type": "dynamic", "factor": 2.0}),
        ("rope_scaling", {"type": "ntk", "factor": 2.0, "mixed_b": 1.0}),
        ("logn_attention_scale", True),
        ("pack_qkv", False),
    ],
)
def test_rewrite_refuses_what_native_gte_cannot_do(key: str, value: object) -> None:
    config = {"model_type": "new", "hidden_size": 64, "num_attention_heads": 4, key: value}
    with pytest.raises(ModelError, match="my/model"):
        rewrite_new_config(config, "my/model")


def test_new_format_loads_with_native_logits(tmp_path: Path, tok_dir: Path) -> None:
    native = build_tiny_gte_classifier(tmp_path / "native", LABELS, tok_dir, seed=7)
    new = build_tiny_gte_classifier(tmp_path / "new", LABELS, tok_dir, seed=7, new_format=True)
    new_config = json.loads((new / "config.json").read_text())
    assert new_config["model_type"] == "new"
    assert new_config["rope_scaling"] == {"factor": 2.0, "type": "ntk"}
    assert any(
        k.startswith("new.encoder.layer.0.attention.qkv_proj")
        for k in load_file(str(new / "model.safetensors"))
    )
    before = _snapshot(new)

    cache = tmp_path / "cache"
    a = load_classifier(str(native), cache_root=cache)
    b = load_classifier(str(new), cache_root=cache)
    assert not a.rewritten and b.rewritten
    assert b.load_dir.parent == cache and b.source_dir == new.resolve()
    assert _snapshot(new) == before  # the user's files are never written
    assert b.labels == a.labels == tuple(LABELS)
    assert a.tokenizer_hash == b.tokenizer_hash

    # Independent check of the rope: Alibaba's fixed NTK (base*s, inv_freq / s**(2/d)).
    d = 32 // 2
    base = 500000.0 * 2.0
    ntk = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float) / d)) / 2.0 ** (2 / d)
    torch.testing.assert_close(b.model.gte.rotary_emb.inv_freq, ntk)

    texts, urls = synthetic_corpus(12, seed=9, median_words=300, max_words=3000)
    batch = a.tokenizer(
        [f"{u}\n\n{t}" for t, u in zip(texts, urls, strict=True)],
        padding=True,
        truncation=True,
        max_length=2048,
        return_tensors="pt",
    )
    with torch.inference_mode():
        la = a.model(**batch).logits
        lb = b.model(**batch).logits
    assert torch.equal(la, lb)

    again = load_classifier(str(new), cache_root=cache)  # cache dir reused
    assert again.load_dir == b.load_dir


def test_loader_errors_name_the_model(tmp_path: Path, tok_dir: Path) -> None:
    with pytest.raises(ModelError, match="no such directory"):
        load_classifier(str(tmp_path / "missing" / "x" / "y"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        load_classifier(str(empty))
    broken = build_tiny_gte_classifier(tmp_path / "broken", LABELS, tok_dir, new_format=True)
    weights = load_file(str(broken / "model.safetensors"))
    del weights["classifier.weight"]
    save_file(weights, str(broken / "model.safetensors"))
    with pytest.raises(ModelError, match=r"broken.*classifier\.weight"):
        load_classifier(str(broken), cache_root=tmp_path / "cache")
    bad_rope = build_tiny_gte_classifier(tmp_path / "rope", LABELS, tok_dir, new_format=True)
    config = json.loads((bad_rope / "config.json").read_text())
    config["rope_scaling"] = {"type": "yarn", "factor": 4.0}
    (bad_rope / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="rope.*rope_scaling"):
        load_classifier(str(bad_rope), cache_root=tmp_path / "cache")


def test_tokenizer_hash_is_content_based(tmp_path: Path, tok_dir: Path) -> None:
    from transformers import AutoTokenizer

    first = AutoTokenizer.from_pretrained(str(tok_dir))
    second = AutoTokenizer.from_pretrained(str(tok_dir))
    second.backend_tokenizer.enable_truncation(16)  # runtime settings are not identity
    assert tokenizer_hash(first) == tokenizer_hash(second)
    other_dir = tmp_path / "other"
    build_wordpiece_tokenizer(["completely different words here"] * 5, other_dir, vocab_size=200)
    assert tokenizer_hash(AutoTokenizer.from_pretrained(str(other_dir))) != tokenizer_hash(first)
