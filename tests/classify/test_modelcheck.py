"""Every classifier is checked before a run pins it; stats name the model they used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub.constants
import pytest
from e2e import tiny_model_dir

from shardwise.classify.modelcheck import check_classifiers, classifier_problems, identity
from shardwise.errors import ModelError
from shardwise.run.modelpin import ModelIdentity

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A private copy of a tiny real classifier (tests damage it)."""
    dst = tmp_path / "topic"
    shutil.copytree(tiny_model_dir("topic"), dst)
    return dst


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face hub cache that huggingface_hub reads (its real layout)."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def put_in_cache(cache: Path, repo: str, model: Path) -> Path:
    """Lay ``model`` out as the hub cache does: refs/main -> snapshots/<commit>/."""
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(COMMIT)
    snapshot = root / "snapshots" / COMMIT
    shutil.copytree(model, snapshot)
    return snapshot


def test_a_real_tiny_classifier_passes(model):
    assert classifier_problems("topic", str(model)) == []


def test_a_missing_directory_is_named(tmp_path):
    [issue] = classifier_problems("topic", str(tmp_path / "models" / "topc"))
    assert issue.line() == (
        f"classifier 'topic' (model '{tmp_path}/models/topc'): no such directory "
        f"({tmp_path}/models/topc) and not a hub id (owner/name)"
    )


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda m: (m / "config.json").unlink(), "no config.json in"),
        (lambda m: (m / "config.json").write_text("{oops"), "config.json is not readable JSON"),
        (lambda m: _edit_config(m, id2label=None), "has no id2label"),
        (
            lambda m: _edit_config(m, architectures=["GteModel"]),
            "hold no sequence classifier",
        ),
        (lambda m: _edit_config(m, num_labels=99), "num_labels 99 but id2label has"),
        (lambda m: (m / "model.safetensors").unlink(), "no weights in"),
        (lambda m: _truncate(m / "model.safetensors"), "model.safetensors is truncated"),
        (lambda m: (m / "tokenizer.json").unlink(), "no tokenizer files in"),
        (lambda m: (m / "tokenizer.json").write_text("{}"), "is not a loadable tokenizer"),
    ],
)
def test_each_kind_of_broken_model_directory_is_refused(model, damage, problem):
    damage(model)
    problems = [issue.problem for issue in classifier_problems("topic", str(model))]
    assert len(problems) == 1 and problem in problems[0], problems


def _edit_config(model: Path, **changes) -> None:
    config = json.loads((model / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (model / "config.json").write_text(json.dumps(config))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])


def test_check_names_every_bad_classifier_and_nothing_else(model, tmp_path):
    classifiers = [
        {"name": "topic", "model": str(model)},
        {"name": "format", "model": str(tmp_path / "nope")},
        {"name": "format_nourl", "model": str(tmp_path / "also" / "nope")},
    ]
    with pytest.raises(ModelError) as info:
        check_classifiers(classifiers)
    lines = str(info.value).splitlines()
    assert lines[0] == "2 classifier(s) cannot be used; nothing was pinned:"
    assert lines[1].startswith("  classifier 'format' (model ")
    assert lines[2].startswith("  classifier 'format_nourl' (model ")
    assert "Fix classifiers[].model" in lines[3]


def test_a_hub_id_in_the_local_cache_is_checked_like_a_directory(model, hub_cache):
    put_in_cache(hub_cache, "WebOrganizer/TopicClassifier", model)
    assert classifier_problems("topic", "WebOrganizer/TopicClassifier") == []
    (
        hub_cache / "models--WebOrganizer--TopicClassifier/snapshots" / COMMIT / "tokenizer.json"
    ).unlink()
    [issue] = classifier_problems("topic", "WebOrganizer/TopicClassifier")
    assert "as a hub id: no tokenizer files in" in issue.problem


def test_an_uncached_hub_id_offline_says_so_plainly(hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    [issue] = classifier_problems("topic", "WebOrganizer/TopicClassifer")
    assert "not in the local Hugging Face cache" in issue.problem
    assert "HF_HUB_OFFLINE is set" in issue.problem
    assert "hf download WebOrganizer/TopicClassifer" in issue.problem


def test_identity_is_a_content_hash_and_the_hub_revision(model, tmp_path, hub_cache):
    cache_root = tmp_path / "identity-cache"
    first = identity(str(model), cache_root=cache_root)
    moved = tmp_path / "elsewhere"
    shutil.copytree(model, moved)
    assert identity(str(moved), cache_root=cache_root).content_hash == first.content_hash
    assert first.revision is None and len(first.content_hash) == 64
    weights = moved / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x01")
    assert identity(str(moved), cache_root=cache_root).content_hash != first.content_hash
    put_in_cache(hub_cache, "WebOrganizer/TopicClassifier", model)
    hub = identity("WebOrganizer/TopicClassifier", cache_root=cache_root)
    assert hub == ModelIdentity(
        model="WebOrganizer/TopicClassifier",
        content_hash=first.content_hash,
        tokenizer_hash=first.tokenizer_hash,
        revision=COMMIT,
    )
    assert len(first.tokenizer_hash) == 64
