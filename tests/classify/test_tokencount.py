"""Token counts in the training tokenizer (``domains.tokenizer``, issue 31)."""

from __future__ import annotations

import pytest
from e2e import tiny_model_dir
from tokenizers import Tokenizer

from shardwise.classify import tokencount
from shardwise.classify.tokencount import TokenCounter
from shardwise.errors import ModelError


def test_counts_are_the_tokenizers_own_whole_text_counts_long_texts_included(monkeypatch):
    folder = tiny_model_dir("topic")
    own = Tokenizer.from_file(str(folder / "tokenizer.json"))
    own.no_truncation()
    counter = TokenCounter.load(str(folder))
    long = " ".join(["the health of science and travel, today"] * 400)  # ~16k characters
    texts = ["Health news today.", "", long, None]
    want = [len(own.encode(t or "", add_special_tokens=False).ids) for t in texts]
    monkeypatch.setattr(tokencount, "CHUNK", 1000)  # the long one is counted in 17 pieces
    monkeypatch.setattr(tokencount, "BATCH_CHARS", 3000)  # ... encoded 3 at a time
    assert len(list(tokencount._pieces(long))) > 10
    batches = list(tokencount._batches(texts))
    assert len(batches) > 5 and all(sum(map(len, p)) <= 3000 for _, p in batches)
    assert counter.count(texts).tolist() == want
    assert len(counter.identity) == 64


def test_a_tokenizer_that_cannot_load_names_the_key(tmp_path):
    with pytest.raises(ModelError, match=r"domains.tokenizer .*cannot load .*tokenizer.json"):
        TokenCounter.load(str(tmp_path))
    with pytest.raises(ModelError, match=r"no such directory, and not in the local Hugging Face"):
        TokenCounter.load("nobody/no-such-tokenizer")
