"""The offline tiny classifiers load like hub checkpoints and run (no network, no mocks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from textsynth import synthetic_corpus
from transformers import AutoTokenizer

from shardwise.classify.models import load_classifier
from shardwise.demo.tinymodels import (
    build_tiny_gte_classifier,
    build_weborganizer_demo_models,
    build_wordpiece_tokenizer,
    weborganizer_labels,
)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    texts, urls = synthetic_corpus(200, seed=1, median_words=40)
    return texts + urls


def test_wordpiece_tokenizer_is_bert_like(tmp_path: Path, corpus: list[str]) -> None:
    build_wordpiece_tokenizer(corpus, tmp_path / "tok", vocab_size=1000)
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert tok.model_max_length == 8192
    assert tok.pad_token_id == 0
    ids = tok("Hello World")["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert tok("HELLO world")["input_ids"] == tok("hello WORLD")["input_ids"]  # uncased


def test_native_tiny_classifier_loads(tmp_path: Path, corpus: list[str]) -> None:
    build_wordpiece_tokenizer(corpus, tmp_path / "tok", vocab_size=1000)
    labels = ["b-label", "a-label", "c-label"]
    out = build_tiny_gte_classifier(tmp_path / "m", labels, tmp_path / "tok", seed=3)
    assert json.loads((out / "config.json").read_text())["model_type"] == "gte"
    tok = AutoTokenizer.from_pretrained(str(out))
    loaded = load_classifier(str(out), cache_root=tmp_path / "cache")
    assert loaded.labels == tuple(labels)  # id2label order, not sorted
    assert not loaded.rewritten
    batch = tok(["some text here", "x"], padding=True, return_tensors="pt")
    with torch.inference_mode():
        logits = loaded.model(**batch).logits
    assert logits.shape == (2, 3)
    assert torch.isfinite(logits).all()


def test_demo_models(tmp_path: Path, corpus: list[str]) -> None:
    paths = build_weborganizer_demo_models(tmp_path / "models", corpus, seed=0)
    assert sorted(paths) == ["format", "format_nourl", "topic", "topic_nourl"]
    label_sets = weborganizer_labels()
    hashes = set()
    for name, path in paths.items():
        config = json.loads((path / "config.json").read_text())
        assert config["model_type"] == "new"  # same rewrite path as the real checkpoints
        assert "auto_map" in config
        size = sum(f.stat().st_size for f in path.iterdir())
        assert size < 4_000_000
        loaded = load_classifier(str(path), cache_root=tmp_path / "cache")
        assert loaded.rewritten
        assert loaded.labels == tuple(label_sets[name.split("_")[0]])
        hashes.add(loaded.tokenizer_hash)
        ids = loaded.tokenizer(["https://a.org/x\n\nsome words"], return_tensors="pt")
        with torch.inference_mode():
            assert loaded.model(**ids).logits.shape == (1, 24)
    assert len(hashes) == 1  # one shared tokenizer
    assert not (tmp_path / "models" / ".tokenizer").exists()
