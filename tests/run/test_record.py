"""Every record of the run's files round-trips, and a damaged field is refused by name."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from shardwise.config import StorageOptions
from shardwise.errors import RecordError
from shardwise.run.claims import Submitter
from shardwise.run.context import RunSettings
from shardwise.run.filestats import FileStats
from shardwise.run.markers import FileMarker, ShardMarker
from shardwise.run.record import Fields

STATS = FileStats(
    file="a/b.jsonl.gz", task_id="a/b.jsonl.gz", shard=3, bytes=100, docs=5, tokens=40,
    seconds=1.5, timings={"read": 0.5, "infer": 1.0}, counts={"null_ids": 1},
    truncated_docs=0, fidelity=({"classifier": "topic", "docs": 5},), models={"topic": {}},
    device="cpu", device_name="cpu", dtype="float32", finished_at="2026-01-01T00:00:00+00:00",
    source_identity="100:7", labelling={"text_field": "text"}, engine={"batches": 1},
    label_counts={"docs": 5, "classifiers": {}, "pairs": {}},
)  # fmt: skip
RECORDS = [
    STATS,
    FileMarker("a/b.jsonl.gz", "a/b.jsonl.gz", 3, 5, "2026-01-01T00:00:00+00:00", "100:7"),
    ShardMarker(
        3,
        8,
        0,
        tasks=1,
        files=1,
        docs=5,
        finished_at="t",
        quarantined=1,
        file_stats={"a/b.jsonl.gz": STATS.figures()},
    ),
    RunSettings(
        "auto",
        "id",
        "text",
        "metadata.url",
        StorageOptions(),
        {"max_length": 128},
        (("topic", "format"),),
        "/in",
        "s3://b/out",
    ),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_a_record_round_trips(record):
    assert type(record).from_json(record.to_json(), "here") == record


@pytest.mark.parametrize(
    ("record", "field", "value", "message"),
    [
        (STATS, "docs", "5", "field 'docs' must be an integer"),
        (STATS, "tokens", -1, "field 'tokens' must be a count >= 0"),
        (STATS, "seconds", True, "field 'seconds' must be a number"),
        (STATS, "fidelity", [1], "field 'fidelity' must be an array of objects"),
        (STATS, "counts", {"null_ids": "x"}, "field 'null_ids' must be an integer"),
        (RECORDS[1], "rows", 2.5, "field 'rows' must be an integer"),
        (RECORDS[1], "file", 7, "field 'file' must be a string"),
        (RECORDS[2], "total_shards", None, "field 'total_shards' must be an integer"),
        (RECORDS[2], "source", "cluster", "field 'source' must be one of"),
        (RECORDS[2], "file_stats", {"x": 1}, "field 'file_stats' must map each file"),
    ],
)
def test_a_damaged_field_is_refused_naming_the_file_and_the_field(record, field, value, message):
    body = json.loads(record.to_json())
    body[field] = value
    with pytest.raises(RecordError, match=message) as refused:
        type(record).from_json(json.dumps(body).encode(), "out/a/b.jsonl.gz.x")
    assert str(refused.value).startswith("out/a/b.jsonl.gz.x")


def test_a_required_field_that_is_absent_is_named():
    body = json.loads(RECORDS[2].to_json())
    del body["shard"]
    with pytest.raises(RecordError, match="field 'shard' is missing"):
        ShardMarker.from_json(json.dumps(body).encode(), "shards/3.done")


def test_settings_name_a_damaged_nested_field():
    body = json.loads(RECORDS[3].to_json())
    body["input"]["text_field"] = ["text"]
    with pytest.raises(RecordError, match=r"settings.json \[input\]: field 'text_field'"):
        RunSettings.from_json(json.dumps(body).encode(), "settings.json")


def test_not_json_and_not_an_object_are_refused():
    with pytest.raises(RecordError, match="x: not valid JSON"):
        Fields.parse(b"{half", "x")
    with pytest.raises(RecordError, match="x: not a JSON object"):
        Fields.parse(b"[]", "x")


def test_the_workflow_record_round_trips_and_a_damaged_one_is_absent(tmp_path):
    submitter = Submitter("/w", "/w/Snakefile", ("/w/c.yaml",), True, 40, "login1", 7, "t")
    submitter.record(tmp_path)
    assert Submitter.recorded(tmp_path) == submitter
    (tmp_path / "claims" / "workflow.json").write_text('{"workdir": 1}')
    assert Submitter.recorded(tmp_path) is None


ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_the_architecture_doc_lists_exactly_the_keys_each_record_writes(record):
    """docs/ARCHITECTURE.md's file table cannot drift from the records."""
    name = type(record).__name__
    (line,) = [ln for ln in ARCHITECTURE.read_text().splitlines() if f"`{name}`) — keys:" in ln]
    listed = re.search(r"keys: ((?:`\w+`(?:, )?)+)", line).group(1)
    assert sorted(re.findall(r"`(\w+)`", listed)) == sorted(json.loads(record.to_json()))
