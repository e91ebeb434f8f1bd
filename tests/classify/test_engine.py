"""The engine end to end on tiny real GTE classifiers (built offline, "new" format)."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from textsynth import synthetic_corpus

from shardwise import config as configmod
from shardwise.classify import calibration, recheck
from shardwise.classify.batching import CannotShrinkError
from shardwise.classify.device import (
    GPU_ENV_VARS,
    fp32_matmul_error,
    gpus_assigned,
    probe_rows,
    select_device,
    select_dtype,
    strict_fp32,
)
from shardwise.classify.engine import ClassifierSpec, Engine
from shardwise.classify.recheck import DEFAULT_RECHECK_MARGIN, top2_margins
from shardwise.config import InferenceSettings
from shardwise.demo.tinymodels import (
    build_tiny_gte_classifier,
    build_weborganizer_demo_models,
    build_wordpiece_tokenizer,
)
from shardwise.errors import DeviceError, ModelError
from shardwise.run.enginefigures import EngineFigures

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
    # one rate per meaning: the engine's is per second of inference (the stats' own
    # tokens_per_s is per second of the file's whole time)
    assert stats["infer_tokens_per_s"] == stats["real_tokens"] / stats["infer_s"]
    assert "tokens_per_s" not in stats
    assert stats["batch_budget"] == 2048 and stats["oom_retries"] == 0
    assert stats["tokenize_fallback_docs"] == 0 and stats["distinct_tokenizers"] == 1
    assert engine.device_name == "cpu" and engine.dtype_name == "float32"
    # every figure has its field in the stats' record, read back as the engine gave it
    assert set(stats) == {f.name for f in dataclasses.fields(EngineFigures)}
    figures = EngineFigures.from_json(json.loads(json.dumps(stats)), "engine")
    assert figures.docs == stats["docs"] and figures.rechecked_docs == stats["rechecked_docs"]


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
    assert select_dtype("bfloat16", "cuda", (8, 6)) is torch.bfloat16
    assert select_dtype("float16", "cuda", (7, 0)) is torch.float16
    with pytest.raises(ModelError, match="dtype"):
        select_dtype("int8", "cpu")


@pytest.mark.parametrize("capability", [(7, 5), (7, 0), (6, 1)])
def test_explicit_bf16_is_refused_below_compute_capability_8(capability) -> None:
    major, minor = capability
    with pytest.raises(
        ModelError, match=rf"capability {major}\.{minor}: bfloat16 needs 8\.0 .* use dtype auto"
    ):
        select_dtype("bfloat16", "cuda", capability)


@pytest.fixture
def no_gpu_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in GPU_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_device_selection(no_gpu_env) -> None:
    assert select_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        assert select_device("auto").type == "cpu"
        with pytest.raises(ModelError, match=r"CUDA is not available here: .*torch\.version\.cuda"):
            select_device("cuda:0")
    with pytest.raises(ModelError, match="expected auto"):
        select_device("tpu")


@pytest.mark.parametrize(
    ("env", "given"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0"}, True),
        ({"CUDA_VISIBLE_DEVICES": "GPU-5c7a1f2e-9d1b-4f3a-8e2c-000000000000"}, True),
        ({"SLURM_JOB_GPUS": "2,3"}, True),
        ({"SLURM_STEP_GPUS": "1"}, True),
        ({"NVIDIA_VISIBLE_DEVICES": "0"}, True),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, True),
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, False),
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, False),
        ({"CUDA_VISIBLE_DEVICES": ""}, False),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, False),
        ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, False),
        ({}, False),
    ],
)
def test_gpus_assigned_reads_the_scheduler_variables(env, given) -> None:
    assert bool(gpus_assigned(env)) is given


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a torch that cannot use CUDA")
@pytest.mark.parametrize(
    "variable", ["CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "NVIDIA_VISIBLE_DEVICES"]
)
def test_auto_refuses_to_fall_back_to_cpu_when_the_job_was_given_a_gpu(
    no_gpu_env, variable
) -> None:
    no_gpu_env.setenv(variable, "0")
    with pytest.raises(ModelError) as err:
        select_device("auto")
    message = str(err.value)
    assert f"given GPU(s) ({variable}=0)" in message
    assert f"torch.version.cuda={torch.version.cuda!r}" in message
    assert "install a CUDA build of torch" in message or "driver" in message
    assert "inference.device: cpu" in message  # the way to run on the CPU on purpose
    with pytest.raises(ModelError, match="given GPU"):
        Engine.load([ClassifierSpec("a", "x/y", "text")], InferenceSettings())
    assert select_device("cpu").type == "cpu"  # explicit cpu is still allowed


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


# -- the fp32 re-check of half-precision near ties ------------------------------------

NAMES = ("topic", "topic_nourl", "format", "format_nourl")


def _half_engine(
    specs, cache_root, margin: float, dtype: str = "bfloat16", budget_dir=None, **kw
) -> Engine:
    settings = InferenceSettings(
        max_length=MAX_LENGTH,
        batch_tokens=2048,
        probs=True,
        dtype=dtype,
        recheck_margin=margin,
        **kw,
    )
    return Engine.load(specs, settings, cache_root=cache_root, budget_dir=budget_dir)


@pytest.fixture(scope="module")
def bf16_plain(specs, cache_root, corpus):
    """bf16 without the re-check: its own labels and its logits (to know the margins)."""
    engine = _half_engine(specs, cache_root, 0.0)
    prepared = engine.prepare(*corpus)
    assert not engine._fp32  # no fp32 copies when the re-check is off
    return engine.run(prepared), engine.infer(prepared)


def _margins(inference, name: str) -> np.ndarray:
    return top2_margins(inference.first_pass[name])


def test_recheck_default_is_on_for_half_precision_only(specs, cache_root, engine, result) -> None:
    assert InferenceSettings().recheck_margin == DEFAULT_RECHECK_MARGIN == "auto"
    inference_schema = configmod.schema()["properties"]["inference"]["properties"]
    assert inference_schema["recheck_margin"]["default"] == DEFAULT_RECHECK_MARGIN
    half = Engine.load(specs[:1], InferenceSettings(dtype="bfloat16"), cache_root=cache_root)
    assert half.recheck_margin == "auto"
    assert {k: v.model.dtype for k, v in half._fp32.items()} == {specs[0].model: torch.float32}
    assert engine.recheck_margin == 0.0 and not engine._fp32  # fp32 engine: nothing to re-check
    assert result.stats["rechecked_docs"] == dict.fromkeys(NAMES, 0)
    assert result.stats["recheck_margin"] == 0.0


def test_tiny_margin_reruns_only_exact_half_precision_ties(
    specs, cache_root, corpus, bf16_plain, caplog
) -> None:
    plain, inference = bf16_plain
    engine = _half_engine(specs, cache_root, 1e-9)
    with caplog.at_level("WARNING", logger="shardwise.classify.engine"):
        labels = engine.run(engine.prepare(*corpus))
        engine.run(engine.prepare(*corpus))
    ties = {name: int((_margins(inference, name) == 0).sum()) for name in NAMES}
    assert labels.stats["rechecked_docs"] == ties  # only top-two logits equal in bf16
    assert sum(ties.values()) < 0.05 * 4 * len(corpus[0])
    # an exact tie's fp32 margin dwarfs a 1e-9 margin: one warning per classifier and job
    records = [r for r in caplog.records if "on the CPU" not in r.getMessage()]  # bf16 here
    warned = sorted(r.getMessage().split("(")[1].split(")")[0] for r in records)
    assert warned == sorted(name for name, count in ties.items() if count)
    assert all("use inference.recheck_margin: auto" in r.getMessage() for r in records)
    assert any(f["margin_too_small"] for f in labels.stats["fidelity"])  # the views show it
    for name in NAMES:
        untouched = _margins(inference, name) > 0
        for suffix in ("label_id", "score"):
            got = labels.columns[f"{name}_{suffix}"].to_numpy()
            want = plain.columns[f"{name}_{suffix}"].to_numpy()
            np.testing.assert_array_equal(got[untouched], want[untouched])


def test_huge_margin_reruns_everything_and_equals_the_fp32_run(
    specs, cache_root, corpus, result
) -> None:
    engine = _half_engine(specs, cache_root, 1e9)
    labels = engine.run(engine.prepare(*corpus))
    n = len(corpus[0])
    assert labels.stats["rechecked_docs"] == dict.fromkeys(NAMES, n)
    assert labels.stats["recheck_tokens"] == labels.stats["real_tokens"]
    assert list(labels.columns) == list(result.columns)
    for column, values in result.columns.items():
        assert labels.columns[column].equals(values), column  # bit for bit
    assert engine.dtype_name == "bfloat16"


def test_mixed_batches_keep_input_order(specs, cache_root, corpus, result, bf16_plain) -> None:
    """Half the documents re-checked: each row gets fp32's answer if re-checked, else bf16's."""
    plain, inference = bf16_plain
    margin = float(np.median(np.concatenate([_margins(inference, n) for n in NAMES])))
    engine = _half_engine(specs, cache_root, margin)
    mixed = engine.infer(engine.prepare(*corpus))
    labels = engine.run(engine.prepare(*corpus))
    changed = {}
    for name in NAMES:
        expected = _margins(inference, name) < margin
        assert 0 < expected.sum() < len(expected)
        np.testing.assert_array_equal(mixed.rechecked[name], expected)
        np.testing.assert_array_equal(mixed.first_pass[name], inference.first_pass[name])
        ids = labels.columns[f"{name}_label_id"].to_numpy()
        fp32_ids = result.columns[f"{name}_label_id"].to_numpy()
        half_ids = plain.columns[f"{name}_label_id"].to_numpy()
        # fp32 rows ran in other batches than the fp32 engine's: equal up to float noise
        fp32_scores = result.columns[f"{name}_score"].to_numpy()
        np.testing.assert_array_equal(ids[expected], fp32_ids[expected])
        np.testing.assert_array_equal(ids[~expected], half_ids[~expected])
        scores = labels.columns[f"{name}_score"].to_numpy()
        np.testing.assert_allclose(scores[expected], fp32_scores[expected], rtol=1e-5)
        np.testing.assert_array_equal(
            scores[~expected], plain.columns[f"{name}_score"].to_numpy()[~expected]
        )
        changed[name] = int((half_ids[expected] != fp32_ids[expected]).sum())
        assert labels.stats["rechecked_docs"][name] == int(expected.sum())
        assert 0 <= labels.stats["recheck_max_margin_error"][name] < margin
    assert labels.stats["recheck_changed"] == changed
    assert sum(changed.values()) > 0  # the tiny bf16 models do flip some near ties
    assert labels.stats["recheck_s"] > 0 and labels.stats["recheck_batches"] > 0


# -- recheck_margin: auto ---------------------------------------------------------------


def _file_labels(labels, name: str) -> np.ndarray:
    return labels.columns[f"{name}_label_id"].to_numpy()


def test_auto_measures_a_threshold_per_classifier_and_agrees_with_fp32(
    specs, cache_root, corpus, result, monkeypatch
) -> None:
    monkeypatch.setattr(calibration, "FIRST_FILE_DOCS", 16)  # most rows decided by the threshold
    monkeypatch.setattr(recheck, "FALLBACK_SHARE", 1.0)  # (the random demo heads would fall back)
    engine = _half_engine(specs, cache_root, "auto")
    texts, urls = corpus
    labels = engine.run(engine.prepare(texts, urls))
    for name in NAMES:
        cal = engine.calibrations[name]
        assert len(cal.errors) == 16
        [(_upto, threshold)] = cal.buckets()
        assert threshold == pytest.approx(calibration.SAFETY * max(cal.errors))
        summary = labels.stats["calibration"][name]
        assert summary["sample_docs"] == 16 and summary["mode"] == "recheck"
        np.testing.assert_array_equal(_file_labels(labels, name), _file_labels(result, name))
    [entry] = [f for f in labels.stats["fidelity"] if f["classifier"] == "format"]
    assert entry["mode"] == "recheck" and entry["docs"] == len(texts)
    assert 16 <= entry["fp32_docs"] < len(texts)
    assert 0 <= entry["residual"] <= entry["residual_upper"] < 0.001 * len(texts)
    again = engine.run(engine.prepare(texts, urls))  # the next file adds 10% of its rows
    assert labels.stats["recheck_margin"] == again.stats["recheck_margin"] == "auto"
    assert again.stats["calibration"]["topic"]["sample_docs"] == 16 + 9


def test_a_calibration_is_kept_and_a_later_job_samples_only_what_is_missing(
    specs, cache_root, corpus, result, tmp_path, monkeypatch
) -> None:
    """The first job's sample is recorded in the run directory; the next job (a fresh
    engine) starts from it: once it is full, no fp32 sample, fewer tokens re-checked,
    the same labels."""
    monkeypatch.setattr(calibration, "SAMPLE_DOCS", 16)
    monkeypatch.setattr(calibration, "FIRST_FILE_DOCS", 16)
    monkeypatch.setattr(recheck, "FALLBACK_SHARE", 1.0)  # (the random demo heads would fall back)
    texts, urls = corpus
    first = _half_engine(specs, cache_root, "auto", budget_dir=tmp_path / "budgets")
    sampled = first.run(first.prepare(texts, urls)).stats
    assert len(list((tmp_path / "budgets").glob("calibration-*.json"))) == len(NAMES)
    second = _half_engine(specs, cache_root, "auto", budget_dir=tmp_path / "budgets")
    seeded = second.run(second.prepare(texts, urls))
    for name in NAMES:
        assert seeded.stats["calibration"][name]["recorded"] == 16
        assert sampled["calibration"][name]["recorded"] == 0
        assert second.calibrations[name].errors == first.calibrations[name].errors
        np.testing.assert_array_equal(_file_labels(seeded, name), _file_labels(result, name))
    assert seeded.stats["calibration_s"] == 0 < sampled["calibration_s"]
    assert seeded.stats["recheck_tokens"] < sampled["recheck_tokens"]


def test_a_partial_calibration_grows_job_by_job(specs, cache_root, corpus, tmp_path, monkeypatch):
    """Short jobs never fill the sample alone: each starts from the record and adds its
    share (10% of a later file), so the sample fills across jobs, not again in each."""
    monkeypatch.setattr(calibration, "FIRST_FILE_DOCS", 16)
    monkeypatch.setattr(recheck, "FALLBACK_SHARE", 1.0)
    texts, urls = corpus
    sizes = []
    for _job in range(3):
        engine = _half_engine(specs[:1], cache_root, "auto", budget_dir=tmp_path / "budgets")
        engine.run(engine.prepare(texts, urls))
        sizes.append(len(engine.calibrations[NAMES[0]].errors))
    assert sizes == [16, 16 + 9, 16 + 9 + 9]  # 10% of each later job's 90 documents
    (record,) = (tmp_path / "budgets").glob("calibration-*.json")
    assert len(json.loads(record.read_text())["errors"]) == sizes[-1]


def test_a_model_with_a_larger_half_precision_error_gets_a_larger_threshold(
    tmp_path: Path, model_paths, cache_root, corpus
) -> None:
    loud = _overflowing_copy(model_paths["topic"], tmp_path / "loud", 16.0)
    specs = [
        ClassifierSpec("calm", str(model_paths["topic"]), "url_text"),
        ClassifierSpec("loud", str(loud), "url_text"),
    ]
    engine = _half_engine(specs, cache_root, "auto")
    engine.run(engine.prepare(*corpus))
    calm, louder = (engine.calibrations[n].buckets()[-1][1] for n in ("calm", "loud"))
    assert louder > 4 * calm > 0


def test_when_most_rows_would_be_rechecked_the_classifier_runs_in_fp32(
    specs, cache_root, corpus, result, monkeypatch, caplog
) -> None:
    monkeypatch.setattr(recheck, "FALLBACK_SHARE", 0.0)  # any near tie at all: fall back
    engine = _half_engine(specs, cache_root, "auto")
    texts, urls = corpus
    with caplog.at_level(logging.WARNING, logger="shardwise.classify.engine"):
        first = engine.run(engine.prepare(texts, urls))
        assert all(engine.calibrations[name].fp32 for name in NAMES)
        assert {f["mode"] for f in first.stats["fidelity"]} == {"recheck"}  # decided after file 1
        labels = engine.run(engine.prepare(texts, urls))
    said = [r.getMessage() for r in caplog.records if "wholly in float32" in r.getMessage()]
    assert len(said) == len(NAMES)  # one line per classifier, when it switches, not per file
    assert {line.split("(")[1].split(")")[0] for line in said} == set(NAMES)
    for line in said:
        assert "% of this file's documents have a top-two margin" in line
        assert "10-15x slower" in line and "inference.dtype: float32" in line
    for entry in labels.stats["fidelity"]:
        assert entry["mode"] == "float32" and entry["fp32_docs"] == len(texts)
        assert entry["residual"] == entry["residual_upper"] == 0.0
    assert {c["mode"] for c in labels.stats["calibration"].values()} == {"float32"}
    for name in NAMES:
        np.testing.assert_array_equal(_file_labels(labels, name), _file_labels(result, name))


def _overflowing_copy(source: Path, target: Path, scale: float) -> Path:
    """A copy of a checkpoint whose classifier head is ``scale`` times larger."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(source, target)
    weights = load_file(str(target / "model.safetensors"))
    weights["classifier.weight"] = weights["classifier.weight"] * scale
    weights["classifier.bias"] = weights["classifier.bias"] * scale
    save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


def test_non_finite_half_rows_are_rerun_in_fp32_even_with_the_recheck_off(
    tmp_path: Path, model_paths, cache_root, corpus
) -> None:
    """fp16 overflows (max 65504) where fp32 does not: those rows come back from fp32."""
    path = _overflowing_copy(model_paths["topic"], tmp_path / "loud", 3e4)
    spec = [ClassifierSpec("loud", str(path), "url_text")]
    texts, urls = corpus
    half = _half_engine(spec, cache_root, 0.0, dtype="float16")
    labels = half.run(half.prepare(texts, urls))
    fp32 = Engine.load(
        spec, InferenceSettings(max_length=MAX_LENGTH, batch_tokens=2048), cache_root=cache_root
    )
    reference = fp32.run(fp32.prepare(texts, urls))
    nonfinite = labels.stats["nonfinite_docs"]["loud"]
    assert 0 < nonfinite < len(texts)
    assert labels.stats["rechecked_docs"]["loud"] == nonfinite
    scores = labels.columns["loud_score"].to_numpy()
    assert np.isfinite(scores).all()
    assert np.isfinite(reference.columns["loud_score"].to_numpy()).all()
    redone = half.infer(half.prepare(texts, urls)).rechecked["loud"]
    np.testing.assert_array_equal(
        labels.columns["loud_label_id"].to_numpy()[redone],
        reference.columns["loud_label_id"].to_numpy()[redone],
    )


def test_non_finite_fp32_logits_fail_naming_the_model_and_row(
    tmp_path: Path, model_paths, cache_root, corpus
) -> None:
    path = _overflowing_copy(model_paths["format"], tmp_path / "broken", float("nan"))
    spec = [ClassifierSpec("broken", str(path), "text")]
    engine = Engine.load(spec, InferenceSettings(max_length=MAX_LENGTH), cache_root=cache_root)
    with pytest.raises(ModelError, match=r"broken.*non-finite logits in float32 \(first at input"):
        engine.run(engine.prepare(*corpus))


def test_a_device_failure_names_the_device_and_host(specs, cache_root, corpus) -> None:
    def illegal_address(rows: int, padded: int) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    engine = Engine.load(
        specs[:1],
        InferenceSettings(max_length=MAX_LENGTH),
        forward_hook=illegal_address,
        cache_root=cache_root,
    )
    with pytest.raises(DeviceError) as err:
        engine.run(engine.prepare(corpus[0][:4], corpus[1][:4]))
    host = __import__("socket").gethostname()
    assert str(err.value).startswith(f"cpu (cpu) on host {host}: RuntimeError: CUDA error")
    assert isinstance(err.value.__cause__, RuntimeError)


def test_stats_count_truncated_documents_and_name_the_attention_kernel(
    engine: Engine, result, corpus
) -> None:
    texts, urls = corpus
    tokenizer = engine._classifiers[0].loaded.tokenizer
    whole = [
        len(tokenizer(f"{u}\n\n{t}")["input_ids"]) > MAX_LENGTH
        or len(tokenizer(t)["input_ids"]) > MAX_LENGTH
        for t, u in zip(texts, urls, strict=True)
    ]
    assert result.stats["truncated_docs"] == sum(whole) > 0
    kernels = {"flash_attention", "efficient_attention", "math", "cudnn_attention"}
    assert result.stats["attention_kernel"] in kernels
    assert result.stats["attention_kernel_unmasked"] in kernels
    assert result.stats["batch_cost"] == 128 and result.stats["pad_efficiency"] > 0.85


# -- on a CUDA GPU (skipped without one; bench/gpu-check.sh runs them) -------------------


@pytest.fixture(scope="module")
def cuda_engine(specs, cache_root) -> Engine:
    settings = InferenceSettings(max_length=MAX_LENGTH, probs=True)  # device and dtype auto
    return Engine.load(specs, settings, cache_root=cache_root)


@pytest.mark.cuda
def test_cuda_auto_device_dtype_and_probe(cuda_engine: Engine, corpus) -> None:
    capability = torch.cuda.get_device_capability(cuda_engine.device)
    assert cuda_engine.device.type == "cuda"
    assert cuda_engine.dtype is (torch.bfloat16 if capability >= (8, 0) else torch.float16)
    labels = cuda_engine.run(cuda_engine.prepare(*corpus))
    stats = labels.stats
    assert stats["batch_budget"] % MAX_LENGTH == 0 and stats["probe_s"] > 0  # probed
    assert stats["attention_kernel"] in {"efficient_attention", "cudnn_attention"}
    assert stats["attention_kernel_unmasked"] != "math"
    assert np.isfinite(labels.columns["topic_score"].to_numpy()).all()


@pytest.mark.cuda
def test_cuda_huge_margin_equals_the_cuda_fp32_run(specs, cache_root, corpus) -> None:
    settings = {"max_length": MAX_LENGTH, "batch_tokens": 4096, "device": "cuda"}
    fp32 = Engine.load(specs, InferenceSettings(dtype="float32", **settings), cache_root=cache_root)
    half = Engine.load(
        specs, InferenceSettings(recheck_margin=1e9, **settings), cache_root=cache_root
    )
    want = fp32.run(fp32.prepare(*corpus))
    got = half.run(half.prepare(*corpus))
    assert got.stats["rechecked_docs"] == dict.fromkeys(NAMES, len(corpus[0]))
    for name in NAMES:
        column = f"{name}_label_id"
        assert got.columns[column].equals(want.columns[column]), name


@pytest.mark.cuda
def test_cuda_run_has_no_per_batch_host_sync(specs, cache_root, corpus) -> None:
    """The syncs of a run (logits fetched once per classifier) do not grow with the batches."""
    import warnings

    counts = []
    for budget in (8192, 512):
        settings = InferenceSettings(
            max_length=MAX_LENGTH, batch_tokens=budget, device="cuda", recheck_margin=0.0
        )
        engine = Engine.load(specs, settings, cache_root=cache_root)
        prepared = engine.prepare(*corpus)
        engine.run(prepared)  # warm-up
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                labels = engine.run(prepared)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = sum("synchroniz" in str(w.message).lower() for w in caught)
        counts.append((syncs, labels.stats["batches"]))
    (few_syncs, few_batches), (many_syncs, many_batches) = counts
    assert many_batches > few_batches
    assert many_syncs == few_syncs <= 2 * len(NAMES)


@pytest.mark.cuda
def test_cuda_fp16_overflow_rows_come_back_from_fp32(
    tmp_path: Path, model_paths, cache_root, corpus
) -> None:
    path = _overflowing_copy(model_paths["topic"], tmp_path / "loud", 3e4)
    spec = [ClassifierSpec("loud", str(path), "url_text")]
    settings = InferenceSettings(
        max_length=MAX_LENGTH, device="cuda", dtype="float16", recheck_margin=0.0
    )
    engine = Engine.load(spec, settings, cache_root=cache_root)
    labels = engine.run(engine.prepare(*corpus))
    assert labels.stats["nonfinite_docs"]["loud"] > 0
    assert np.isfinite(labels.columns["loud_score"].to_numpy()).all()


def test_float32_is_made_strict_and_checked(monkeypatch) -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.set_float32_matmul_precision("medium")
    try:
        assert strict_fp32(torch.device("cpu")) == ""
        assert torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision("highest")
    assert fp32_matmul_error(torch.device("cpu")) < 1e-5

    def tf32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """TF32's 10-bit mantissa: the inputs rounded as a tensor core would."""
        keep = torch.tensor(~((1 << 13) - 1), dtype=torch.int32)
        return (a.view(torch.int32) & keep).view(torch.float32) @ (b.view(torch.int32) & keep).view(
            torch.float32
        )

    assert fp32_matmul_error(torch.device("cpu"), tf32) > 1e-4
    monkeypatch.setattr("shardwise.classify.device.fp32_matmul_error", lambda device: 2e-3)
    text = strict_fp32(torch.device("cpu"), {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"})
    assert "float32 matmuls on cpu are not float32 (relative error 2.0e-03" in text
    assert "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 turns TF32 on: unset it in the job" in text
