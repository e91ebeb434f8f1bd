"""A model swapped at any moment of a job's start never labels a file: the job labels with
exactly what it checked, or labels nothing.

The run's ``topic`` classifier names ``models/topic``, a symlink to model A (run.json pins
A). Model B has A's shapes and other weights (its ``model.safetensors`` is as large as A's).
At each of twelve moments of a shard job's start (before the check, after it, before and
after each classifier's load, after the engine is built, after the first file), the test
either repoints the link to B, or writes B's weights over A's file in place and gives it
back A's mtime (same size, same mtime). Then, in every case: the job refused with a
ModelError before any file was marked, or every file it marked carries A's labels (the
probabilities of a reference labelling with A) and ``verify --complete`` passes. The job
runs in process with the real engine (tiny models, CPU); the output is local, and on the
moto S3 server for two of the moments.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from e2e import tiny_model_dir
from inproc import TINY, s3_run_config
from safetensors.numpy import load_file

from shardwise.classify import engine as engine_mod
from shardwise.classify import gate
from shardwise.classify.shard_job import run_shard
from shardwise.demo.corpus import demo_config, write_corpus
from shardwise.errors import ModelError
from shardwise.ops.verify import check as verify
from shardwise.planner.prepare import prepare_run
from shardwise.run import outputs
from shardwise.run.opened import open_run

pytestmark = pytest.mark.slow

NAMES = ("topic", "topic_nourl", "format", "format_nourl")
#: The points of a job's start where the model is swapped (``gate.moment`` and the engine's
#: loads): before the check, after it, before and after each classifier's load, after the
#: engine is built, after the first labelled file.
MOMENTS = (
    "start",
    "checked",
    *(f"{when}:{name}" for name in NAMES for when in ("before-load", "after-load")),
    "loaded",
    "labelled",
)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """A and B for ``topic`` (same shapes and file size, other weights), the link to A, and
    the three other classifiers."""
    root = tmp_path_factory.mktemp("models")
    a = Path(shutil.copytree(tiny_model_dir("topic"), root / "topic-A"))
    b = Path(shutil.copytree(a, root / "topic-B"))
    raw = (a / "model.safetensors").read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    data = bytearray(raw[8 + size :])
    rng = np.random.default_rng(7)
    for name, tensor in load_file(str(a / "model.safetensors")).items():
        begin, end = header[name]["data_offsets"]  # A's layout: B is as large, byte for byte
        data[begin:end] = (tensor + rng.normal(0, 0.5, tensor.shape).astype(tensor.dtype)).tobytes()
    (b / "model.safetensors").write_bytes(raw[: 8 + size] + bytes(data))
    assert (a / "model.safetensors").stat().st_size == (b / "model.safetensors").stat().st_size
    (root / "topic").symlink_to(a)
    for name in NAMES[1:]:
        shutil.copytree(tiny_model_dir(name), root / name)
    return root


class Swap:
    """Swaps ``topic`` to B at one moment, and puts A back."""

    def __init__(self, models: Path, how: str, at: str) -> None:
        self.models, self.how, self.at, self.done = models, how, at, False
        self.weights = models / "topic-A" / "model.safetensors"
        self.original = self.weights.read_bytes()
        self.stat = self.weights.stat()

    def __call__(self, moment: str) -> None:
        if moment != self.at or self.done:
            return
        self.done = True
        if self.how == "symlink":  # a `latest` link repointed while the job starts
            link = self.models / "topic"
            tmp = self.models / ".topic-new"
            tmp.symlink_to(self.models / "topic-B")
            tmp.replace(link)
            return
        with self.weights.open("r+b") as fh:  # written in place, size and mtime kept
            fh.write((self.models / "topic-B" / "model.safetensors").read_bytes())
        os.utime(self.weights, ns=(self.stat.st_atime_ns, self.stat.st_mtime_ns))

    def restore(self) -> None:
        link = self.models / "topic"
        link.unlink()
        link.symlink_to(self.models / "topic-A")
        self.weights.write_bytes(self.original)
        os.utime(self.weights, ns=(self.stat.st_atime_ns, self.stat.st_mtime_ns))


def config(tmp_path: Path, models: Path) -> dict:
    write_corpus(tmp_path / "corpus", TINY)
    cfg = demo_config(tmp_path, total_shards=1)
    for c in cfg["classifiers"]:
        c["model"] = str(models / c["name"])
    cfg["inference"].update({"max_length": 64, "device": "cpu"})
    return cfg


def scores(run_dir: Path) -> dict[str, list[float]]:
    """Each marked file's ``topic`` probabilities (what model labelled it)."""
    ctx = open_run(run_dir)
    out = {}
    for rel in sorted(outputs.marked(ctx.output)):
        data = ctx.output.read_bytes(f"{rel}.labels.parquet")
        table = pq.read_table(pa.BufferReader(data))
        out[rel] = table["topic_score"].to_pylist()
    return out


def label_with_swap(cfg: dict, swap: Swap, monkeypatch) -> tuple[ModelError | None, Path]:
    """Plan, then run the shard job with ``swap`` at its moment; the refusal, if any."""
    run_dir = Path(cfg["run_dir"])
    prepare_run(cfg, main_process=True, dryrun=True)
    original = engine_mod.load_classifier
    names = {str((swap.models / n).resolve()): n for n in NAMES}
    names[str(swap.models / "topic-A")] = "topic"

    def load(model, **kwargs):
        name = names.get(str(model), "?")
        swap(f"before-load:{name}")
        loaded = original(model, **kwargs)
        swap(f"after-load:{name}")
        return loaded

    monkeypatch.setattr(engine_mod, "load_classifier", load)
    monkeypatch.setattr(gate, "on_moment", swap)
    try:
        run_shard(run_dir, 0, progress=False)
    except ModelError as refused:
        return refused, run_dir
    finally:
        swap.restore()
    return None, run_dir


@pytest.fixture(scope="module")
def reference(models, tmp_path_factory) -> dict[str, list[float]]:
    """Every file labelled with A."""
    base = tmp_path_factory.mktemp("reference")
    cfg = config(base, models)
    prepare_run(cfg, main_process=True, dryrun=True)
    run_shard(Path(cfg["run_dir"]), 0, progress=False)
    return scores(Path(cfg["run_dir"]))


def judged(refused, run_dir: Path, reference) -> str:
    """The case's outcome; fails when a file carries another model's labels."""
    found = scores(run_dir)
    if refused is not None:
        assert found == {}, f"refused ({refused}) after marking {sorted(found)}"
        assert "nothing was labelled" in str(refused).lower() or "is not the one" in str(refused)
        return "refused"
    assert found.keys() == reference.keys()
    for rel, probs in found.items():
        np.testing.assert_allclose(probs, reference[rel], rtol=0, atol=1e-6, err_msg=rel)
    assert verify.verify_run(run_dir, complete=True).ok
    return "labelled with A"


@pytest.mark.parametrize("how", ["symlink", "in-place"])
@pytest.mark.parametrize("at", MOMENTS)
def test_a_swap_at_any_moment_never_labels_with_the_other_model(
    models, reference, tmp_path, monkeypatch, how, at
):
    swap = Swap(models, how, at)
    refused, run_dir = label_with_swap(config(tmp_path, models), swap, monkeypatch)
    assert swap.done
    outcome = judged(refused, run_dir, reference)
    if at == "start":  # before the check: refused, naming the link and where it points
        assert outcome == "refused"
        if how == "symlink":
            assert f"{models / 'topic'} (-> {models / 'topic-B'})" in str(refused)
    elif how == "symlink" or at in ("labelled",):
        assert outcome == "labelled with A"  # the job loads the directory it checked
    elif at.startswith("before-load:topic") or at.startswith("after-load:") or at == "loaded":
        assert outcome == "refused"  # the bytes changed under the load: seen before labelling


@pytest.mark.s3
@pytest.mark.parametrize("how", ["symlink", "in-place"])
def test_a_swap_during_the_load_on_s3_never_labels_with_the_other_model(
    models, tmp_path, monkeypatch, s3, how
):
    cfg, _ = s3_run_config(tmp_path, s3, total_shards=1)
    for c in cfg["classifiers"]:
        c["model"] = str(models / c["name"])
    cfg["inference"].update({"max_length": 64, "device": "cpu"})
    swap = Swap(models, how, "before-load:topic")
    refused, run_dir = label_with_swap(cfg, swap, monkeypatch)
    assert swap.done
    if how == "symlink":
        assert refused is None and verify.verify_run(run_dir, complete=True).ok
    else:
        assert refused is not None and scores(run_dir) == {}
