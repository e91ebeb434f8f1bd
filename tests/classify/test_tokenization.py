"""Shared tokenization gives exactly the tokenizer's own output for "{url}\\n\\n{text}"."""

from __future__ import annotations

import pytest
from textsynth import synthetic_corpus
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from shardwise.classify.models import tokenizer_hash
from shardwise.classify.tokenization import SharedTokenizer, StreamKey, TokenizerInfo, format_input
from shardwise.demo.tinymodels import build_wordpiece_tokenizer

EDGE_TEXTS = [
    "",
    "one",
    "   leading and trailing   ",
    "Ünïcödé àccents, ÇAPS and ß; İstanbul",
    "\u0301combining mark first, then text",
    "中文字符 mixed with latin 日本語",
    "control\x00chars\x1cand\x1fseparators\x7f here\u200b zero width",
    "emoji 😀🎉 and symbols ©®™ and numbers 3.14159",
    "literal [CLS] and [SEP] and [PAD] tokens in text",
    "tabs\tand\r\nwindows\nnewlines\n\n\nmany",
    "x" * 150 + " long word above the wordpiece limit " + "y" * 101,
    "url-like https://example.com/a?b=c&d=e#frag inside",
]
EDGE_URLS = [
    "",
    "https://www.example.com/",
    "http://例子.测试/path?q=ü",
    "https://a.b/" + "segment/" * 400,  # longer than the room left for text
    "ftp://x",
]


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    texts, urls = synthetic_corpus(120, seed=5, median_words=80, max_words=6000)
    texts += EDGE_TEXTS
    urls += [EDGE_URLS[i % len(EDGE_URLS)] for i in range(len(EDGE_TEXTS))]
    # texts long enough to take the pre-cut path (> 4096 chars) and a pathological one whose
    # prefix yields too few tokens (only >100-char words -> one [UNK] each)
    texts.append("word " * 3000)
    urls.append("https://long.example/")
    texts.append(" ".join(["z" * 120] * 400) + " tail words here")
    urls.append("")
    return texts, urls


@pytest.fixture(scope="module")
def bert_tokenizer(tmp_path_factory: pytest.TempPathFactory, corpus: tuple[list[str], list[str]]):
    out = tmp_path_factory.mktemp("tok")
    build_wordpiece_tokenizer(corpus[0][:100] + corpus[1][:100], out, vocab_size=1200)
    return AutoTokenizer.from_pretrained(str(out))


def _reference(tokenizer, kind: str, texts, urls, max_length: int) -> list[list[int]]:
    strings = [format_input(kind, t, u) for t, u in zip(texts, urls, strict=True)]
    return tokenizer(strings, truncation=True, max_length=max_length)["input_ids"]


def _cut_off(tokenizer, kind: str, texts, urls, max_length: int) -> list[bool]:
    """Whether each input has more tokens than ``max_length`` (encoded whole, untruncated)."""
    strings = [format_input(kind, t, u) for t, u in zip(texts, urls, strict=True)]
    whole = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    whole.no_truncation()
    encodings = whole.encode_batch(strings)
    return [len(e.ids) > max_length for e in encodings]


@pytest.mark.parametrize("max_length", [16, 128, 8192])
def test_shared_equals_per_classifier_tokenization(bert_tokenizer, corpus, max_length) -> None:
    texts, urls = corpus
    digest = tokenizer_hash(bert_tokenizer)
    info = TokenizerInfo.from_tokenizer(bert_tokenizer, digest)
    assert info.splittable, info.reason
    shared = SharedTokenizer([info])
    keys = [StreamKey(digest, "url_text", max_length), StreamKey(digest, "text", max_length)]
    result = shared.encode(texts, urls, keys + keys)  # duplicate keys are encoded once
    assert set(result.streams) == set(keys)
    assert result.fallback_docs == 0 and result.verified_docs > 0
    for key in keys:
        expected = _reference(bert_tokenizer, key.input, texts, urls, max_length)
        stream = result.streams[key]
        for i, ids in enumerate(expected):
            assert stream.doc(i) == ids, (key.input, i, texts[i][:60], urls[i][:60])
        assert stream.lengths.tolist() == [len(ids) for ids in expected]
        assert stream.pad_id == bert_tokenizer.pad_token_id
        truncated = _cut_off(bert_tokenizer, key.input, texts, urls, max_length)
        assert stream.truncated.tolist() == truncated
        assert max_length == 8192 or any(truncated)  # the flags are not all False by accident
    assert info.splittable  # nothing forced a fallback


def _byte_bpe_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=600, special_tokens=["<pad>", "<unk>"])
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>")


def test_unknown_pipeline_falls_back_per_document(corpus) -> None:
    texts, urls = corpus
    tokenizer = _byte_bpe_tokenizer(texts[:50])
    info = TokenizerInfo.from_tokenizer(tokenizer, "bpe")
    assert not info.splittable  # byte-level BPE: "\n\n" is not a clean boundary
    key = StreamKey("bpe", "url_text", 64)
    result = SharedTokenizer([info]).encode(texts, urls, [key])
    assert result.fallback_docs == len(texts)
    expected = _reference(tokenizer, "url_text", texts, urls, 64)
    assert [result.streams[key].doc(i) for i in range(len(texts))] == expected
    truncated = _cut_off(tokenizer, "url_text", texts, urls, 64)
    assert result.streams[key].truncated.tolist() == truncated and any(truncated)


def test_verification_catches_a_wrong_assumption(corpus) -> None:
    """Force the split path on a tokenizer where it is wrong: the sample check must catch it."""
    texts, urls = corpus
    tokenizer = _byte_bpe_tokenizer(texts[:50])
    info = TokenizerInfo.from_tokenizer(tokenizer, "bpe")
    info.splittable = True
    key = StreamKey("bpe", "url_text", 64)
    result = SharedTokenizer([info], verify_docs=4).encode(texts[:20], urls[:20], [key])
    assert not info.splittable and "differ" in info.reason
    assert result.fallback_docs == 20
    expected = _reference(tokenizer, "url_text", texts[:20], urls[:20], 64)
    assert [result.streams[key].doc(i) for i in range(20)] == expected


def test_mismatched_lengths_rejected(bert_tokenizer) -> None:
    digest = tokenizer_hash(bert_tokenizer)
    shared = SharedTokenizer([TokenizerInfo.from_tokenizer(bert_tokenizer, digest)])
    with pytest.raises(ValueError, match="urls"):
        shared.encode(["a", "b"], ["u"], [StreamKey(digest, "text", 16)])


def test_a_giant_first_document_is_cut_not_encoded_whole(bert_tokenizer, corpus) -> None:
    """A 5 MB text first in a file was encoded whole by the verification sample (4 s, 0.6 GB
    for max_length 128): now only its prefix is, and its ids and truncation flag stay exact."""
    texts, urls = corpus
    giant = " ".join(texts[:50]) * (2_000_000 // len(" ".join(texts[:50])) + 1)
    batch, batch_urls = [giant, *texts[:10]], urls[:11]
    digest = tokenizer_hash(bert_tokenizer)
    info = TokenizerInfo.from_tokenizer(bert_tokenizer, digest)
    seen: list[int] = []
    reference = info.encode_reference_truncated

    def recorded(strings, max_length):
        seen.extend(len(s) for s in strings)
        return reference(strings, max_length)

    info.encode_reference_truncated = recorded  # records what is encoded whole, encodes it
    keys = [StreamKey(digest, "url_text", 128), StreamKey(digest, "text", 128)]
    result = SharedTokenizer([info]).encode(batch, batch_urls, keys)
    assert result.verified_docs > 0 and seen and max(seen) < 400_000  # never the giant
    for key in keys:
        prefix = giant[:20_000]  # the whole text's first 128 tokens lie in here
        want = _reference(bert_tokenizer, key.input, [prefix], batch_urls[:1], 128)[0]
        assert result.streams[key].doc(0) == want
        assert result.streams[key].truncated[0]
