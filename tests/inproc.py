"""In-process runs for fast tests: ``prepare_run`` + ``run_shard`` with a fake engine.

Planning, markers, verify, coverage and quarantine are exercised on real files in
``tmp_path`` at millisecond cost; the engine is replaced because those tests are about
the layout, not the labels (the end-to-end tests run the real models).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
from e2e import tiny_model_dir

from shardwise.classify.shard_job import run_shard
from shardwise.demo.corpus import DemoSize, demo_config, write_corpus
from shardwise.planner.prepare import prepare_run
from shardwise.run import plan
from shardwise.store.location import Location

TINY = DemoSize(files_per_category=1, docs_per_file=5, median_words=8, max_words=30)
NAMES = ("topic", "topic_nourl", "format", "format_nourl")


class FakeEngine:
    """Deterministic labels without torch: enough for the layout verify checks."""

    device = "cpu"
    device_name = "fake"
    dtype_name = "float32"

    def __init__(self, names: tuple[str, ...] = NAMES) -> None:
        self.names = names

    def prepare(self, texts: list[str], urls: list[str]) -> int:
        return len(texts)

    def run(self, n: int) -> SimpleNamespace:
        columns: dict[str, pa.Array] = {}
        for name in self.names:
            columns[f"{name}_label"] = pa.array(["a"] * n, pa.string())
            columns[f"{name}_label_id"] = pa.array([0] * n, pa.int32())
            columns[f"{name}_score"] = pa.array([0.5] * n, pa.float32())
        # as a bf16 engine with a calibrated re-check would report (classify/recheck.py)
        fidelity = [
            {"classifier": name, "docs": n, "fp32_docs": min(n, 1), "mode": "recheck",
             "residual": 1e-7 * n, "residual_upper": 2e-7 * n, "margin_too_small": False}
            for name in self.names
        ]  # fmt: skip
        # 0.01 s of engine time per document, a fifth of it the fp32 re-check
        stats = {"tokens": 3 * n, "fidelity": fidelity, "infer_s": 0.01 * n, "recheck_s": 0.002 * n}
        return SimpleNamespace(columns=columns, stats=stats)


def demo_run_config(tmp_path: Path, total_shards: int) -> dict:
    """The demo's config under ``tmp_path``, with tiny real models (planning checks them)."""
    cfg = demo_config(tmp_path, total_shards=total_shards)
    for c in cfg["classifiers"]:
        c["model"] = str(tiny_model_dir(c["name"]))
    return cfg


def s3_run_config(tmp_path: Path, s3, total_shards: int = 2) -> tuple[dict, Location]:
    """The tiny demo corpus on the moto S3 server (``s3`` fixture), input and output
    there; (the config, not yet planned; the input's location)."""
    corpus = Location(s3.url("corpus"), s3.options())
    for path in write_corpus(tmp_path / "corpus", TINY):
        corpus.write_bytes(str(path.relative_to(tmp_path / "corpus")), path.read_bytes())
    cfg = demo_run_config(tmp_path, total_shards)
    cfg["input"]["uri"] = s3.url("corpus")
    cfg["output"]["uri"] = s3.url("labels")
    cfg["storage"] = s3.storage_config()
    return cfg, corpus


def plan_run(tmp_path: Path, *, total_shards: int = 3, size: DemoSize = TINY, **overrides) -> dict:
    """A planned (not yet labelled) in-process run; returns its config."""
    write_corpus(tmp_path / "corpus", size)
    cfg = demo_run_config(tmp_path, total_shards)
    cfg.update(overrides)
    prepare_run(cfg, main_process=True, dryrun=True)
    return cfg


def label(run_dir: Path, shards=None) -> None:
    """Run the shard jobs (all non-empty shards by default) with the fake engine."""
    table = plan.load(run_dir)
    for shard in sorted(shards if shards is not None else plan.nonempty_shards(table)):
        run_shard(run_dir, shard, engine_factory=lambda _ctx: FakeEngine(), progress=False)
