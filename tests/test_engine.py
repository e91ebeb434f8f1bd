"""The engine end to end on tiny real GTE classifiers (built offline, "new" format)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from shardwise.batching import CannotShrinkError
from shardwise.engine import (
    ClassifierSpec,
    Engine,
    InferenceSettings,
    probe_rows,
    select_device,
    select_dtype,
)
from shardwise.errors import ModelError
from shardwise.tinymodels import (
    build_tiny_gte_classifier,
    build_weborganizer_demo_models,
    build_wordpiece_tokenizer,
    synthetic_corpus,
)

MAX_LENGTH = 192


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models run faster single-threaded, and CI shares its 2 cores with other jobs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    return synthetic_corpus(90, seed=11, median_words=40, max_words=600, tail_fraction=0.05)


@pytest.fixture(scope="module")
def model_paths(tmp_path_factory: pytest.TempPathFactory, corpus) -> dict[str, Path]:
    texts, urls = corpus
    return build_weborganizer_demo_models(tmp_path_factory.mktemp("models"), texts + urls)


@pytest.fixture(scope="module")
def specs(model_paths: dict[str, Path]) -> list[ClassifierSpec]:
    return [
        ClassifierSpec(name, str(path), "text" if name.endswith("nourl") else "url_text")
        for name, path in model_paths.items()
    ]


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def engine(specs, cache_root) -> Engine:
    settings = InferenceSettings(max_length=MAX_LENGTH, batch_tokens=2048, probs=True)
    return Engine.load(specs, settings, cache_root=cache_root)


@pytest.fixture(scope="module")
def result(engine: Engine, corpus):
    texts, urls = corpus
    return engine.run(engine.prepare(texts, urls))


def _reference(engine: Engine, texts: list[str], urls: list[str]) -> dict[str, np.ndarray]:
    """Unsorted reference: batches of 8 in input order, tokenized by each model's tokenizer."""
    out: dict[str, np.ndarray] = {}
    for clf in engine._classifiers:
        tokenizer, model = clf.loaded.tokenizer, clf.loaded.model
        strings = [
            f"{url}\n\n{text}" if clf.spec.input == "url_text" else text
            for text, url in zip(texts, urls, strict=True)
        ]
        rows = []
        for start in range(0, len(strings), 8):
            batch = tokenizer(
                strings[start : start + 8],
                padding=True,
                truncation=True,
                max_length=MAX_LENGTH,
                return_tensors="pt",
            )
            with torch.inference_mode():
                rows.append(model(**batch).logits.float().softmax(-1).numpy())
        out[clf.spec.name] = np.concatenate(rows)
    return out


def _assert_same_labels(labels, reference: dict[str, np.ndarray]) -> None:
    for name, probs in reference.items():
        label_ids = labels.columns[f"{name}_label_id"].to_numpy()
        top2 = np.sort(probs, axis=1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 1e-4  # ignore numerical near-ties
        assert clear.mean() > 0.9
        np.testing.assert_array_equal(label_ids[clear], probs.argmax(1)[clear])
        np.testing.assert_allclose(
            labels.columns[f"{name}_score"].to_numpy(), probs.max(1), rtol=1e-4, atol=1e-5
        )


def test_columns_types_and_labels(engine: Engine, result, corpus) -> None:
    n = len(corpus[0])
    names = ["topic", "topic_nourl", "format", "format_nourl"]
    expected = [f"{n_}_{s}" for n_ in names for s in ("label", "label_id", "score", "probs")]
    assert list(result.columns) == expected
    for name in names:
        cols = result.columns
        assert cols[f"{name}_label"].type == pa.string()
        assert cols[f"{name}_label_id"].type == pa.int32()
        assert cols[f"{name}_score"].type == pa.float32()
        assert cols[f"{name}_probs"].type == pa.list_(pa.float16())
        assert all(len(col) == n for col in (cols[f"{name}_label"], cols[f"{name}_probs"]))
        labels = engine.labels[name]
        assert len(labels) == 24
        ids = cols[f"{name}_label_id"].to_pylist()
        assert cols[f"{name}_label"].to_pylist() == [labels[i] for i in ids]
        assert len(set(ids)) > 1  # the tiny models do discriminate
        probs = np.array(cols[f"{name}_probs"].to_pylist(), dtype=np.float32)
        np.testing.assert_allclose(probs.sum(1), 1.0, atol=0.02)
        np.testing.assert_allclose(probs.max(1), cols[f"{name}_score"].to_numpy(), atol=1e-3)


def test_stats(engine: Engine, result, corpus) -> None:
    stats = result.stats
    for key in (
        "docs",
        "tokens",
        "real_tokens",
        "padded_tokens",
        "pad_efficiency",
        "tokenize_s",
        "infer_s",
        "batch_budget",
        "oom_retries",
    ):
        assert key in stats
    assert stats["docs"] == len(corpus[0])
    assert 0.5 < stats["pad_efficiency"] <= 1.0
    assert stats["padded_tokens"] >= stats["real_tokens"] == stats["tokens"] > 0
    assert stats["batch_budget"] == 2048 and stats["oom_retries"] == 0
    assert stats["tokenize_fallback_docs"] == 0 and stats["distinct_tokenizers"] == 1
    assert engine.device_name == "cpu" and engine.dtype_name == "float32"


def test_order_restored_matches_unsorted_reference(engine: Engine, result, corpus) -> None:
    texts, urls = corpus
    _assert_same_labels(result, _reference(engine, texts, urls))


def test_oom_halves_and_retries_without_dropping(specs, cache_root, result, corpus) -> None:
    seen: list[int] = []

    def fake_oom(rows: int, padded: int) -> None:
        seen.append(padded)
        if padded > 700:
            raise torch.OutOfMemoryError("simulated: CUDA out of memory")

    settings = InferenceSettings(max_length=MAX_LENGTH, batch_tokens=4096)
    engine = Engine.load(specs, settings, forward_hook=fake_oom, cache_root=cache_root)
    texts, urls = corpus
    labels = engine.run(engine.prepare(texts, urls))
    assert labels.stats["oom_retries"] >= 2
    assert labels.stats["batch_budget"] <= 700  # remembered
    assert labels.stats["docs"] == len(texts)
    for name in ("topic", "format_nourl"):
        assert labels.columns[f"{name}_label_id"] == result.columns[f"{name}_label_id"]
        np.testing.assert_allclose(
            labels.columns[f"{name}_score"].to_numpy(),
            result.columns[f"{name}_score"].to_numpy(),
            rtol=1e-5,
        )
    # a later file starts at the remembered budget: no new OOMs
    again = engine.run(engine.prepare(texts[:20], urls[:20]))
    assert again.stats["oom_retries"] == labels.stats["oom_retries"]


def test_oom_on_single_document_is_an_error(specs, cache_root, corpus) -> None:
    def always_oom(rows: int, padded: int) -> None:
        raise torch.OutOfMemoryError("simulated")

    engine = Engine.load(
        specs[:1],
        InferenceSettings(max_length=MAX_LENGTH, batch_size=4),
        forward_hook=always_oom,
        cache_root=cache_root,
    )
    with pytest.raises(ModelError, match="single document"):
        engine.run(engine.prepare(corpus[0][:5], corpus[1][:5]))


def test_fixed_batch_size_gives_same_labels(specs, cache_root, result, corpus) -> None:
    settings = InferenceSettings(max_length=MAX_LENGTH, batch_size=7)
    engine = Engine.load(specs, settings, cache_root=cache_root)
    labels = engine.run(engine.prepare(*corpus))
    assert labels.stats["batch_budget"] == 7 and "topic_probs" not in labels.columns
    for name in ("topic", "topic_nourl", "format", "format_nourl"):
        np.testing.assert_allclose(
            labels.columns[f"{name}_score"].to_numpy(),
            result.columns[f"{name}_score"].to_numpy(),
            rtol=1e-4,
        )


def test_prepare_on_another_thread_while_run(engine: Engine, result, corpus) -> None:
    texts, urls = corpus
    first = engine.prepare(texts, urls)
    box: dict[str, object] = {}
    worker = threading.Thread(target=lambda: box.update(p=engine.prepare(texts[::-1], urls[::-1])))
    worker.start()
    labels = engine.run(first)
    worker.join()
    reversed_labels = engine.run(box["p"])  # type: ignore[arg-type]
    ids = labels.columns["topic_label_id"].to_pylist()
    assert ids == result.columns["topic_label_id"].to_pylist()
    assert reversed_labels.columns["topic_label_id"].to_pylist() == ids[::-1]


def test_empty_input(engine: Engine) -> None:
    labels = engine.run(engine.prepare([], []))
    assert labels.stats["docs"] == 0
    assert len(labels.columns["topic_label"]) == 0
    assert labels.columns["topic_probs"].type == pa.list_(pa.float16())


def test_distinct_tokenizers_are_not_shared(tmp_path: Path, specs, cache_root, corpus) -> None:
    texts, urls = corpus
    build_wordpiece_tokenizer(texts[:30], tmp_path / "tok", vocab_size=500)
    other = build_tiny_gte_classifier(tmp_path / "other", ["x", "y", "z"], tmp_path / "tok")
    engine = Engine.load(
        [specs[0], ClassifierSpec("other", str(other), "url_text")],
        InferenceSettings(max_length=MAX_LENGTH),
        cache_root=cache_root,
    )
    assert engine.distinct_tokenizers == 2
    labels = engine.run(engine.prepare(texts[:25], urls[:25]))
    _assert_same_labels(labels, _reference(engine, texts[:25], urls[:25]))


def test_dtype_selection_by_capability() -> None:
    assert select_dtype("auto", "cpu") is torch.float32
    assert select_dtype("auto", "cuda", (9, 0)) is torch.bfloat16
    assert select_dtype("auto", "cuda", (8, 0)) is torch.bfloat16
    assert select_dtype("auto", "cuda", (7, 5)) is torch.float16
    assert select_dtype("float32", "cuda", (9, 0)) is torch.float32
    assert select_dtype("bfloat16", "cpu") is torch.bfloat16
    with pytest.raises(ModelError, match="dtype"):
        select_dtype("int8", "cpu")


def test_device_selection() -> None:
    assert select_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        assert select_device("auto").type == "cpu"
        with pytest.raises(ModelError, match="CUDA is not available"):
            select_device("cuda:0")
    with pytest.raises(ModelError, match="expected auto"):
        select_device("tpu")


def test_load_errors_name_the_model(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="nowhere"):
        Engine.load([ClassifierSpec("a", str(tmp_path / "nowhere"), "text")], InferenceSettings())
    with pytest.raises(ModelError, match="input"):
        Engine.load([ClassifierSpec("a", "x/y", "html")], InferenceSettings())


def test_other_architectures_load_as_is(tmp_path: Path, cache_root, corpus) -> None:
    """A non-GTE classifier (tiny BERT) loads unchanged and gets a 2D padding mask."""
    import shutil

    from transformers import BertConfig, BertForSequenceClassification

    texts, urls = corpus
    build_wordpiece_tokenizer(texts[:30], tmp_path / "tok", vocab_size=500)
    config = BertConfig(
        vocab_size=500,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_LENGTH,
        num_labels=3,
        id2label={0: "n", 1: "m", 2: "k"},
        label2id={"n": 0, "m": 1, "k": 2},
        initializer_range=0.3,
    )
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(str(tmp_path / "bert"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tmp_path / "tok" / name, tmp_path / "bert" / name)
    engine = Engine.load(
        [ClassifierSpec("bert", str(tmp_path / "bert"), "url_text")],
        InferenceSettings(max_length=MAX_LENGTH, batch_tokens=1024),
        cache_root=cache_root,
    )
    assert engine.labels["bert"] == ("n", "m", "k")
    assert not engine._classifiers[0].key_mask_4d
    labels = engine.run(engine.prepare(texts[:30], urls[:30]))
    _assert_same_labels(labels, _reference(engine, texts[:30], urls[:30]))


def test_budget_probe_halves_until_it_fits() -> None:
    tried: list[int] = []
    cleaned: list[int] = []

    def attempt(rows: int) -> None:
        tried.append(rows)
        if rows > 5:
            raise torch.OutOfMemoryError("simulated")

    assert probe_rows(attempt, 64, lambda: cleaned.append(1)) == 4
    assert tried == [64, 32, 16, 8, 4] and len(cleaned) == 4

    def never(rows: int) -> None:
        raise torch.OutOfMemoryError("simulated")

    with pytest.raises(CannotShrinkError):
        probe_rows(never, 3)
