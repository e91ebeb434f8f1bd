"""A real shard job (tiny offline models) writes label counts and its shard's summary."""

import collections
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from e2e import make_run

from shardwise import config as configmod
from shardwise.classify.shard_job import load_engine, run_shard
from shardwise.ops.domains import compute as domains
from shardwise.planner.prepare import prepare_run
from shardwise.run import plan, summaries
from shardwise.run.fields import FieldPaths
from shardwise.run.reader import read_documents
from shardwise.store.location import Location

pytestmark = pytest.mark.slow


def test_shard_jobs_write_counts_and_summaries_that_survive_retries(tmp_path, demo_models):
    config = make_run(tmp_path, demo_models, total_shards=2)
    cfg = configmod.load_yaml(config)
    run_dir = prepare_run(cfg, main_process=True, dryrun=True).run_dir
    engines = {}

    def factory(ctx):
        return engines.setdefault("e", load_engine(ctx))

    run_shard(run_dir, 0, engine_factory=factory, progress=False)
    labels, corpus = Path(cfg["output"]["uri"]), Location(cfg["input"]["uri"])
    rows = plan.files_of_shard(plan.load(run_dir), 0).to_pylist()
    for row in rows:
        rel = row["file"]
        stats = json.loads((labels / f"{rel}.stats.json").read_text())
        table = pq.read_table(labels / f"{rel}.labels.parquet")
        texts = read_documents(corpus, rel, FieldPaths()).texts
        topic = collections.Counter(table["topic_label"].to_pylist())
        counts = stats["label_counts"]
        assert counts["docs"] == table.num_rows == stats["docs"]
        assert counts["text_bytes"] == sum(len(t.encode()) for t in texts)
        assert {k: v[0] for k, v in counts["classifiers"]["topic"].items()} == topic
        assert sorted(counts["pairs"]) == ["topic,format", "topic_nourl,format_nourl"]
    marker = json.loads((run_dir / "shards" / "0.done").read_text())
    assert {f: v["docs"] for f, v in marker["file_stats"].items()} == {
        r["file"]: json.loads((labels / f"{r['file']}.stats.json").read_text())["docs"]
        for r in rows
    }
    first = summaries.read(run_dir, 0)
    assert sorted(first.task_ids) == sorted({r["task_id"] for r in rows})
    assert first.incomplete_tasks == []

    # A retry after the marker was lost: every file is skipped, and the summary is rebuilt
    # from the progress journal; without the journal, from the stats (local output).
    for drop_journal in (False, True):
        (run_dir / "shards" / "0.done").unlink()
        summaries.summary_path(run_dir, 0).unlink()
        if drop_journal:
            (run_dir / "progress" / "0.jsonl").unlink()
        report = run_shard(run_dir, 0, engine_factory=factory, progress=False)
        again = summaries.read(run_dir, 0)
        assert report.labelled == 0
        assert again.task_ids == first.task_ids
        assert again.cells.equals(first.cells)

    run_shard(run_dir, 1, engine_factory=factory, progress=False)
    d = domains.compute(domains.load(run_dir), classifier="format_nourl")
    every = collections.Counter()
    for p in labels.rglob("*.labels.parquet"):
        every.update(pq.read_table(p)["format_nourl_label"].to_pylist())
    n = sum(every.values())
    got = {cell[0]: s for cell, s in zip(d.cell_labels, d.est.share, strict=True) if s > 0}
    assert d.est.exact
    assert got == pytest.approx({k: v / n for k, v in every.items()})
