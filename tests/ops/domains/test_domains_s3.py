"""``shardwise domains`` on a run whose output is a bucket (moto's S3 server).

The shard jobs build each shard's summary from their progress journal: no stats object
is read back; ``shardwise domains`` then reads local files only (no request at all).
"""

from __future__ import annotations

import collections
import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from e2e import SMALL, run_snakemake
from test_storage_s3_workflow import upload_tree, write_config

from shardwise.cli.main import main
from shardwise.demo.corpus import write_corpus

pytestmark = [pytest.mark.slow, pytest.mark.s3]


def test_domains_of_a_bucket_output_are_exact_and_read_nothing_remote(
    tmp_path: Path, demo_models: Path, s3: Any, capsys: Any
) -> None:
    write_corpus(tmp_path / "local-corpus", SMALL)
    upload_tree(s3, tmp_path / "local-corpus", "corpus")
    config = write_config(tmp_path, s3, demo_models, total_shards=4)
    s3.reset()
    run_snakemake(config)
    log = s3.server.log()
    stats_gets = [r.key for r in log if r.method == "GET" and r.key.endswith(".stats.json")]
    assert stats_gets == []

    s3.reset()
    assert main(["domains", "--run-dir", str(tmp_path / "run"), "--classifier", "topic",
                     "--format", "json"]) == 0  # fmt: skip
    assert s3.server.log() == []
    doc = json.loads(capsys.readouterr().out)

    counts: collections.Counter[str] = collections.Counter()
    for key in s3.keys("labels/"):
        if key.endswith(".labels.parquet"):
            counts.update(pq.read_table(io.BytesIO(s3.get(key)))["topic_label"].to_pylist())
    total = sum(counts.values())
    assert doc["exact"] is True
    assert doc["tasks_labelled"] == doc["tasks_total"]
    assert {c["labels"]["topic"]: c["share"] for c in doc["cells"]} == pytest.approx(
        {k: v / total for k, v in counts.items()}
    )
    assert (tmp_path / "run" / "report" / "domains.png").read_bytes()[:4] == b"\x89PNG"
