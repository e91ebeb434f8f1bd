"""Dolma attributes: keys, rows, compression, and what a damaged file says."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from shardwise.config import Settings
from shardwise.errors import ConfigError, RecordError
from shardwise.run import dolma, sidecar

COLUMNS = {
    "topic_label": pa.array(["Science & Tech.", "Health"]),
    "topic_label_id": pa.array([3, 7], pa.int32()),
    "topic_score": pa.array([0.5, 0.75], pa.float32()),
    "topic_probs": pa.array([[0.5, 0.5], [0.25, 0.75]], pa.list_(pa.float16())),
}


@pytest.mark.parametrize("rel", ["a/p.json.gz", "a/p.json.zst", "a/p.jsonl", "a/p.json"])
def test_rows_follow_the_documents_with_valid_jq_keys_compressed_as_the_source(rel):
    raw = dolma.build(rel, ["d1", "d2"], COLUMNS, "web-org")
    rows = [json.loads(line) for line in dolma.decompress(raw, rel).decode().splitlines()]
    assert rows == [
        {"id": "d1", "attributes": {"web_org__topic__label": "Science & Tech.",
         "web_org__topic__label_id": 3, "web_org__topic__prob": 0.5,
         "web_org__topic__probs": [0.5, 0.5]}},
        {"id": "d2", "attributes": {"web_org__topic__label": "Health",
         "web_org__topic__label_id": 7, "web_org__topic__prob": 0.75,
         "web_org__topic__probs": [0.25, 0.75]}},
    ]  # fmt: skip
    parsed = dolma.AttributesFile.from_bytes(raw, rel)
    assert parsed.ids == ("d1", "d2")
    assert parsed.problems(["d1", "d2"], ["topic"]) == []
    assert parsed.problems(["d1", "dX"], ["topic"]) == [
        "ids differ from the documents' at row 1: 'd2' where the documents have 'dX'"
    ]
    assert "no label of classifier(s) format" in parsed.problems(None, ["topic", "format"])[0]


def test_ids_the_input_wrote_as_numbers_are_numbers_in_the_attributes():
    columns = {**COLUMNS, sidecar.ID_JSON: pa.array(["0", None], pa.string())}
    raw = dolma.build("a/p.jsonl", ["0", "d2"], columns, "w")
    parsed = dolma.AttributesFile.from_bytes(raw, "a/p.jsonl")
    assert parsed.ids == (0, "d2")  # dolma mix compares them by JSON type: 0 != "0"
    assert parsed.problems([0, "d2"], ["topic"]) == []
    assert parsed.problems(["0", "d2"], ["topic"]) == [
        "ids differ from the documents' at row 0: 0 where the documents have '0'"
    ]


def test_only_json_lines_sources_get_attributes():
    assert dolma.applies("a.json.gz") and dolma.applies("b.jsonl.zst")
    assert not dolma.applies("c.parquet")


def test_a_file_that_is_not_attributes_is_refused_naming_it():
    with pytest.raises(RecordError, match="x.json.gz: cannot be decompressed"):
        dolma.AttributesFile.from_bytes(b"not gzip", "x.json.gz")
    with pytest.raises(RecordError, match="x.json: line 2 has no id and attributes object"):
        dolma.AttributesFile.from_bytes(b'{"id": 1, "attributes": {}}\n{"id": 2}\n', "x.json")


def _cfg(input_uri: str, **dolma_cfg) -> dict:
    return {
        "run_dir": "run",
        "input": {"uri": input_uri},
        "output": {"uri": "labels", "dolma": {"enabled": True, **dolma_cfg}},
        "sharding": {"total_shards": 4},
        "classifiers": [{"name": "topic", "model": "m", "input": "text"}],
    }


def test_the_attributes_go_beside_the_documents_or_where_the_config_says():
    assert Settings.from_config(_cfg("s3://b/ds/documents/")).dolma.uri == (
        "s3://b/ds/attributes/weborganizer"
    )
    named = Settings.from_config(_cfg("/data/ds/documents", name="wo2"))
    assert (named.dolma.name, named.dolma.uri) == ("wo2", "/data/ds/attributes/wo2")
    assert Settings.from_config(_cfg("/data/x", uri="/data/attrs")).dolma.uri == "/data/attrs"
    with pytest.raises(ConfigError, match="does not end in /documents.*set output.dolma.uri"):
        Settings.from_config(_cfg("/data/corpus"))
    with pytest.raises(ConfigError, match="output.dolma.name"):
        Settings.from_config(_cfg("/data/ds/documents", name="bad name"))
