import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from shardwise.errors import InputError
from shardwise.reader import Fields, read_documents
from shardwise.storage import Location

RECORDS = [
    {"id": "d1", "text": "hello", "url": "https://a", "metadata": {"url": "https://m1"}},
    {"id": "d2", "text": None, "url": None, "metadata": {"url": "https://m2"}},
    {"id": "d3", "text": "", "url": "https://c", "metadata": {"url": None}},
]


def write(tmp_path, name, records):
    path = tmp_path / name
    lines = "".join(json.dumps(r) + "\n" for r in records).encode()
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(records), path)
    elif name.endswith(".gz"):
        path.write_bytes(gzip.compress(lines))
    elif name.endswith(".zst"):
        path.write_bytes(zstandard.ZstdCompressor().compress(lines))
    else:
        path.write_bytes(lines)
    return name


@pytest.mark.parametrize("name", ["f.parquet", "f.jsonl", "f.jsonl.gz", "f.jsonl.zst"])
def test_every_format_reads_ids_texts_urls_in_order(tmp_path, name):
    rel = write(tmp_path, name, RECORDS)
    docs = read_documents(Location(str(tmp_path)), rel, Fields())
    assert docs.ids == ["d1", "d2", "d3"]
    assert docs.texts == ["hello", "", ""]
    assert docs.urls == ["https://a", "", "https://c"]
    assert docs.counts["null_texts"] == 1


@pytest.mark.parametrize("name", ["f.parquet", "f.jsonl.gz"])
def test_dotted_paths_reach_nested_fields(tmp_path, name):
    rel = write(tmp_path, name, RECORDS)
    docs = read_documents(Location(str(tmp_path)), rel, Fields(url="metadata.url"))
    assert docs.urls == ["https://m1", "https://m2", ""]


def test_parquet_reads_only_needed_columns(tmp_path):
    records = [dict(r, big="x" * 1000) for r in RECORDS]
    rel = write(tmp_path, "f.parquet", records)
    docs = read_documents(Location(str(tmp_path)), rel, Fields(url="metadata.url"))
    assert len(docs) == 3


def test_duplicate_ids_are_kept_and_counted(tmp_path):
    rel = write(tmp_path, "f.jsonl", [RECORDS[0], RECORDS[0]])
    docs = read_documents(Location(str(tmp_path)), rel, Fields())
    assert docs.ids == ["d1", "d1"]
    assert docs.counts["duplicate_ids"] == 1


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    (tmp_path / "f.jsonl").write_bytes(b'{"id": "x", "text": "caf\xe9 ok"}\n')
    docs = read_documents(Location(str(tmp_path)), "f.jsonl", Fields())
    assert docs.texts == ["caf\ufffd ok"]
    assert docs.counts["invalid_utf8_lines"] == 1


def test_corrupt_parquet_names_the_file(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(InputError, match=r"bad\.parquet: cannot read parquet file"):
        read_documents(Location(str(tmp_path)), "bad.parquet", Fields())


def test_truncated_gzip_names_the_file(tmp_path):
    data = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in RECORDS * 50))
    (tmp_path / "t.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"t\.jsonl\.gz: cannot read jsonl file: EOFError"):
        read_documents(Location(str(tmp_path)), "t.jsonl.gz", Fields())


def test_bad_json_line_names_file_and_line(tmp_path):
    (tmp_path / "f.jsonl").write_bytes(b'{"id": "a", "text": "x"}\n{oops\n')
    with pytest.raises(InputError, match=r"f\.jsonl: line 2 is not valid JSON"):
        read_documents(Location(str(tmp_path)), "f.jsonl", Fields())


def test_missing_id_column_is_an_error(tmp_path):
    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "f.parquet")
    with pytest.raises(InputError, match="no id field 'id'"):
        read_documents(Location(str(tmp_path)), "f.parquet", Fields())


def test_empty_file_gives_no_documents(tmp_path):
    (tmp_path / "e.jsonl").write_bytes(b"")
    assert len(read_documents(Location(str(tmp_path)), "e.jsonl", Fields())) == 0


def test_missing_file_says_it_was_removed_after_planning(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_documents(Location(str(tmp_path)), "gone.parquet", Fields())
