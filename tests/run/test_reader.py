import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from shardwise.errors import InputError
from shardwise.run.fields import FieldPaths
from shardwise.run.reader import file_format, json_ids, read_documents
from shardwise.store.location import Location

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


@pytest.mark.parametrize(
    "name",
    ["f.parquet", "f.jsonl", "f.jsonl.gz", "f.jsonl.zst", "f.json", "f.json.gz", "f.json.zst"],
)
def test_every_format_reads_ids_texts_urls_in_order(tmp_path, name):
    rel = write(tmp_path, name, RECORDS)
    docs = read_documents(Location(str(tmp_path)), rel, FieldPaths())
    assert docs.ids == ["d1", "d2", "d3"]
    assert docs.texts == ["hello", "", ""]
    assert docs.urls == ["https://a", "", "https://c"]
    assert docs.counts["null_texts"] == 1
    assert docs.counts["empty_texts"] == 1  # "" says as little as null


@pytest.mark.parametrize("name", ["f.parquet", "f.jsonl"])
def test_empty_and_whitespace_only_texts_are_counted_like_null_ones(tmp_path, name):
    texts = ["a doc", "", " ", "\n\t ", None, "\u3000"]  # U+3000: an ideographic space
    rel = write(tmp_path, name, [{"id": str(i), "text": t} for i, t in enumerate(texts)])
    docs = read_documents(Location(str(tmp_path)), rel, FieldPaths(url=None))
    assert docs.texts == ["a doc", "", " ", "\n\t ", "", "\u3000"]  # labelled as they are
    assert (docs.counts["empty_texts"], docs.counts["null_texts"]) == (4, 1)


@pytest.mark.parametrize("name", ["f.parquet", "f.jsonl.gz"])
def test_dotted_paths_reach_nested_fields(tmp_path, name):
    rel = write(tmp_path, name, RECORDS)
    docs = read_documents(Location(str(tmp_path)), rel, FieldPaths(url="metadata.url"))
    assert docs.urls == ["https://m1", "https://m2", ""]


def test_parquet_reads_only_needed_columns(tmp_path):
    records = [dict(r, big="x" * 1000) for r in RECORDS]
    rel = write(tmp_path, "f.parquet", records)
    docs = read_documents(Location(str(tmp_path)), rel, FieldPaths(url="metadata.url"))
    assert len(docs) == 3


def test_duplicate_ids_are_kept_and_counted(tmp_path):
    rel = write(tmp_path, "f.jsonl", [RECORDS[0], RECORDS[0]])
    docs = read_documents(Location(str(tmp_path)), rel, FieldPaths())
    assert docs.ids == ["d1", "d1"]
    assert docs.counts["duplicate_ids"] == 1


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    (tmp_path / "f.jsonl").write_bytes(b'{"id": "x", "text": "caf\xe9 ok"}\n')
    docs = read_documents(Location(str(tmp_path)), "f.jsonl", FieldPaths(url=None))
    assert docs.texts == ["caf\ufffd ok"]
    assert docs.counts["invalid_utf8_lines"] == 1


def test_corrupt_parquet_names_the_file(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(InputError, match=r"bad\.parquet: cannot read parquet file"):
        read_documents(Location(str(tmp_path)), "bad.parquet", FieldPaths())


def test_truncated_gzip_names_the_file(tmp_path):
    data = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in RECORDS * 50))
    (tmp_path / "t.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"t\.jsonl\.gz: cannot read jsonl file: EOFError"):
        read_documents(Location(str(tmp_path)), "t.jsonl.gz", FieldPaths())


def test_bad_json_line_names_file_and_line(tmp_path):
    (tmp_path / "f.jsonl").write_bytes(b'{"id": "a", "text": "x"}\n{oops\n')
    with pytest.raises(InputError, match=r"f\.jsonl: line 2 is not valid JSON"):
        read_documents(Location(str(tmp_path)), "f.jsonl", FieldPaths())


FORMATS = ["f.parquet", "f.jsonl", "f.jsonl.gz", "f.jsonl.zst"]
NESTED = [
    {"doc": {"id": "a"}, "body": {"text": "one"}, "meta": {"url": "https://a"}},
    {"doc": {"id": "b"}, "body": {"text": "two"}, "meta": {"url": "https://b"}},
]


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize(
    ("fields", "key", "path", "suggestion"),
    [
        (FieldPaths(text="txt"), "input.text_field", "txt", "text"),
        (FieldPaths(text="body"), "input.text_field", "body", None),
        (FieldPaths(id="idd"), "input.id_field", "idd", "id"),
        (FieldPaths(url="metadata.ur"), "input.url_field", "metadata.ur", "metadata.url"),
    ],
)
def test_a_field_in_no_row_fails_the_file_naming_field_file_and_what_exists(
    tmp_path, name, fields, key, path, suggestion
):
    rel = write(tmp_path, name, RECORDS)
    with pytest.raises(InputError) as info:
        read_documents(Location(str(tmp_path)), rel, fields)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / rel}: {key} {path!r} is in none of its 3 row(s); ")
    assert "fields found: id, metadata, metadata.url, text, url." in message
    if suggestion:
        assert f"Did you mean {suggestion!r}?" in message
    else:
        assert "Did you mean" not in message


@pytest.mark.parametrize("name", FORMATS)
def test_nested_paths_are_checked_through_structs(tmp_path, name):
    rel = write(tmp_path, name, NESTED)
    loc = Location(str(tmp_path))
    docs = read_documents(loc, rel, FieldPaths(id="doc.id", text="body.text", url="meta.url"))
    assert (docs.ids, docs.texts, docs.urls) == (
        ["a", "b"],
        ["one", "two"],
        ["https://a", "https://b"],
    )
    with pytest.raises(
        InputError, match=r"input.text_field 'body.txt' .* Did you mean 'body.text'"
    ):
        read_documents(loc, rel, FieldPaths(id="doc.id", text="body.txt", url="meta.url"))


@pytest.mark.parametrize("name", FORMATS)
def test_the_url_is_neither_read_nor_required_when_no_classifier_uses_it(tmp_path, name):
    rel = write(tmp_path, name, [{"id": "a", "text": "x"}])
    docs = read_documents(Location(str(tmp_path)), rel, FieldPaths(url=None))
    assert (docs.urls, dict(docs.counts)) == ([""], {})
    with pytest.raises(InputError, match="input.url_field 'url' is in none of its 1 row"):
        read_documents(Location(str(tmp_path)), rel, FieldPaths())


@pytest.mark.parametrize("name", ["f.jsonl", "f.jsonl.gz", "f.jsonl.zst"])
def test_jsonl_rows_without_a_field_are_labelled_and_counted(tmp_path, name):
    records = [
        {"id": "a", "text": "x", "url": "u"},
        {"text": "y"},
        {"id": "c", "url": None},
        {"id": None, "text": None, "url": "w"},
    ]
    rel = write(tmp_path, name, records)
    docs = read_documents(Location(str(tmp_path)), rel, FieldPaths())
    assert (docs.ids, docs.texts, docs.urls) == (
        ["a", None, "c", None],
        ["x", "y", "", ""],
        ["u", "", "", "w"],
    )
    assert dict(docs.counts) == {
        "missing_id": 1,
        "missing_text": 1,
        "missing_url": 1,
        "null_ids": 1,
        "null_texts": 1,
        "null_urls": 1,
    }


def test_parquet_rows_whose_parent_struct_is_null_count_as_missing(tmp_path):
    table = pa.table(
        {
            "id": ["a", "b", "c"],
            "text": ["x", None, "z"],
            "meta": pa.array(
                [{"url": "https://a"}, None, {"url": None}],
                pa.struct([("url", pa.string())]),
            ),
        }
    )
    pq.write_table(table, tmp_path / "f.parquet")
    docs = read_documents(Location(str(tmp_path)), "f.parquet", FieldPaths(url="meta.url"))
    assert docs.urls == ["https://a", "", ""]
    assert dict(docs.counts) == {"missing_url": 1, "null_urls": 1, "null_texts": 1}


@pytest.mark.parametrize("name", FORMATS)
def test_non_string_texts_are_read_as_strings_and_counted(tmp_path, name):
    rel = write(tmp_path, name, [{"id": "a", "text": 7}, {"id": "b", "text": 12}])
    docs = read_documents(Location(str(tmp_path)), rel, FieldPaths(url=None))
    assert (docs.texts, dict(docs.counts)) == (["7", "12"], {"non_string_texts": 2})


def test_null_ids_are_not_counted_as_duplicates(tmp_path):
    rel = write(tmp_path, "f.jsonl", [{"id": None, "text": "a"}, {"id": None, "text": "b"}])
    docs = read_documents(Location(str(tmp_path)), rel, FieldPaths(url=None))
    assert dict(docs.counts) == {"null_ids": 2}


def test_ids_written_as_numbers_keep_their_json_beside_the_string(tmp_path):
    records = [{"id": 0, "text": "a"}, {"id": "b", "text": "b"}, {"id": 2.5, "text": "c"}]
    rel = write(tmp_path, "f.jsonl", [*records, {"id": None, "text": "d"}])
    docs = read_documents(Location(str(tmp_path)), rel, FieldPaths(url=None))
    assert (docs.ids, docs.id_json) == (["0", "b", "2.5", None], ["0", None, "2.5", None])
    assert json_ids(docs.ids, docs.id_json) == [0, "b", 2.5, None]
    strings = read_documents(
        Location(str(tmp_path)), write(tmp_path, "g.jsonl", RECORDS), FieldPaths()
    )
    assert strings.id_json is None  # the usual case: nothing kept beside the ids


def test_a_utf8_byte_order_mark_is_dropped_and_counted(tmp_path):
    (tmp_path / "f.jsonl").write_bytes(
        b'\xef\xbb\xbf{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n'
    )
    docs = read_documents(Location(str(tmp_path)), "f.jsonl", FieldPaths(url=None))
    assert (docs.ids, dict(docs.counts)) == (["a", "b"], {"utf8_bom_lines": 1})


def test_an_empty_file_fails_no_field_check(tmp_path):
    pq.write_table(pa.table({"x": pa.array([], pa.string())}), tmp_path / "f.parquet")
    (tmp_path / "e.jsonl").write_bytes(b"\n")
    loc = Location(str(tmp_path))
    assert len(read_documents(loc, "f.parquet", FieldPaths())) == 0
    assert len(read_documents(loc, "e.jsonl", FieldPaths())) == 0


def test_empty_file_gives_no_documents(tmp_path):
    (tmp_path / "e.jsonl").write_bytes(b"")
    assert len(read_documents(Location(str(tmp_path)), "e.jsonl", FieldPaths())) == 0


def test_missing_file_says_it_was_removed_after_planning(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_documents(Location(str(tmp_path)), "gone.parquet", FieldPaths())


def test_file_format_by_extension():
    assert file_format("a.jsonl.zst") == "jsonl"
    assert file_format("a.parquet") == "parquet"
    assert file_format("a.json") == "jsonl"  # Dolma's names: JSON Lines
    assert file_format("a.json.gz") == file_format("a.json.zst") == "jsonl"
    assert file_format("a.json.bz2") is None


@pytest.mark.parametrize(
    ("name", "body"),
    [("doc.json", json.dumps(RECORDS, indent=2)), ("doc.json", json.dumps(RECORDS)),
     ("doc.json.gz", json.dumps({"docs": RECORDS}, indent=1))],
)  # fmt: skip
def test_a_json_file_that_is_one_document_is_refused_naming_it(tmp_path, name, body):
    data = body.encode()
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    with pytest.raises(InputError, match=rf"{name}: line 1 .*looks like one JSON document"):
        read_documents(Location(str(tmp_path)), name, FieldPaths())


def test_dolma_documents_read_their_nested_url(tmp_path):
    rel = write(tmp_path, "part-0.json.gz", RECORDS)
    docs = read_documents(Location(str(tmp_path)), rel, FieldPaths(url="metadata.url"))
    assert docs.urls == ["https://m1", "https://m2", ""]
