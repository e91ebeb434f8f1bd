"""The dry run reads a sample: a field no file has fails planning before anything is pinned."""

import gzip
import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from e2e import minimal_config

from shardwise.errors import ConfigError
from shardwise.planner import fieldcheck
from shardwise.planner.prepare import prepare_run
from shardwise.run import runjson
from shardwise.run.fields import FieldPaths
from shardwise.store.location import Location

ROWS = [{"id": str(i), "text": f"doc {i}", "meta": {"url": f"https://e/{i}"}} for i in range(5)]


def parquet_bytes(rows=ROWS) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def jsonl_bytes(rows=ROWS) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def write_corpus(root, names, rows=ROWS):
    """Files of both formats under ``root`` (by extension)."""
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".parquet"):
            path.write_bytes(parquet_bytes(rows))
        elif name.endswith(".gz"):
            path.write_bytes(gzip.compress(jsonl_bytes(rows)))
        else:
            path.write_bytes(jsonl_bytes(rows))
    return root


def test_spread_takes_first_middle_last_and_everything_when_few():
    files = [f"f{i:02d}" for i in range(11)]
    assert fieldcheck.spread(files, 3) == ["f00", "f05", "f10"]
    assert fieldcheck.spread(files, 1) == ["f05"]
    assert fieldcheck.spread(files[:2], 3) == ["f00", "f01"]
    assert fieldcheck.spread(files, 0) == []


def test_sample_is_per_format():
    files = [("a/1.parquet", 1), ("a/2.jsonl", 1), ("b/3.jsonl.gz", 1), ("c/4.parquet", 1)]
    assert fieldcheck.sample(files, "auto", 3) == {
        "jsonl": ["a/2.jsonl", "b/3.jsonl.gz"],
        "parquet": ["a/1.parquet", "c/4.parquet"],
    }


@pytest.mark.parametrize("ext", [".parquet", ".jsonl", ".jsonl.gz"])
def test_a_field_no_sampled_file_has_is_refused_with_files_fields_and_fix(tmp_path, ext):
    root = write_corpus(tmp_path, [f"c{i}/part{ext}" for i in range(5)])
    files = [(p.relative_to(root).as_posix(), p.stat().st_size) for p in sorted(root.rglob("*.*"))]
    with pytest.raises(ConfigError) as info:
        fieldcheck.check_sample(Location(str(root)), files, FieldPaths(text="body", url=None))
    message = str(info.value)
    kind = "parquet" if ext == ".parquet" else "jsonl"
    assert message.startswith(f"input.text_field 'body' is in none of the 3 sampled {kind} file(s)")
    assert f"{root}/c0/part{ext}" in message and f"{root}/c4/part{ext}" in message
    assert "fields found: id, meta, meta.url, text." in message
    assert "Fix input.text_field in the config" in message
    assert "nothing was pinned or submitted" in message


def test_nested_paths_and_right_fields_pass(tmp_path):
    root = write_corpus(tmp_path, ["a.parquet", "b.jsonl"])
    files = [("a.parquet", 1), ("b.jsonl", 1)]
    result = fieldcheck.check_sample(Location(str(root)), files, FieldPaths(url="meta.url"))
    assert result == fieldcheck.SampleResult(files=2, notes=())


def test_a_field_some_sampled_files_lack_is_a_note_not_a_refusal(tmp_path):
    write_corpus(tmp_path, ["a.jsonl", "c.jsonl"])
    write_corpus(tmp_path, ["b.jsonl"], rows=[{"id": "1", "body": "x"}])
    files = [("a.jsonl", 1), ("b.jsonl", 1), ("c.jsonl", 1)]
    result = fieldcheck.check_sample(Location(str(tmp_path)), files, FieldPaths(url=None))
    [note] = result.notes
    assert note.startswith("input.text_field 'text' is absent from 1 of 3 sampled jsonl file(s)")
    assert f"{tmp_path}/b.jsonl" in note


def test_an_unreadable_sampled_file_says_nothing_about_the_config(tmp_path):
    write_corpus(tmp_path, ["a.parquet"])
    (tmp_path / "b.parquet").write_bytes(b"not parquet")
    files = [("a.parquet", 1), ("b.parquet", 11)]
    result = fieldcheck.check_sample(Location(str(tmp_path)), files, FieldPaths(url=None))
    assert result.files == 1
    [note] = result.notes
    assert note.startswith("sampled file unreadable (its job will fail and name it)")


def test_a_jsonl_sample_reads_only_the_first_rows(tmp_path):
    rows = [{"id": "1", "text": "x"}] * 100 + [{"id": "2"}] * 1000 + ["not json"]
    (tmp_path / "a.jsonl").write_text(
        "".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in rows)
    )
    result = fieldcheck.check_sample(
        Location(str(tmp_path)), [("a.jsonl", 1)], FieldPaths(url=None)
    )
    assert result == fieldcheck.SampleResult(files=1)  # the bad last line is never read


def test_planning_refuses_before_pinning_and_notes_partial_absence(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", ["a/1.parquet", "b/2.jsonl"])
    cfg = minimal_config(tmp_path, corpus, input={"uri": str(corpus), "text_field": "body"})
    with pytest.raises(ConfigError, match="input.text_field 'body' is in none of the 1 sampled"):
        prepare_run(cfg, main_process=True, dryrun=True)
    assert not (tmp_path / "run" / runjson.RUN_JSON).exists()
    assert not (tmp_path / "labels").exists()
    cfg["input"]["sample_files"] = 0  # the sample off: planning goes on, the jobs catch it
    prepare_run(cfg, main_process=True, dryrun=True)
    assert (tmp_path / "run" / runjson.RUN_JSON).exists()


@pytest.mark.s3
def test_on_s3_a_parquet_sample_reads_footers_not_whole_files(tmp_path, s3):
    # over SMALL_FILE_BYTES (4 MiB), so read by ranges rather than whole
    big = [{"id": str(i), "text": os.urandom(1000).hex()} for i in range(2500)]
    client = s3.client()
    for i in range(3):
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(big), buf, compression="none")
        client.put_object(Bucket=s3.name, Key=f"corpus/c{i}/p.parquet", Body=buf.getvalue())
        client.put_object(Bucket=s3.name, Key=f"corpus/c{i}/p.jsonl", Body=jsonl_bytes())
    loc = Location(s3.url("corpus"), s3.options())
    files = loc.list_files()
    total = sum(size for _rel, size in files)
    s3.reset()
    with pytest.raises(ConfigError) as info:
        fieldcheck.check_sample(loc, files, FieldPaths(text="body", url=None))
    assert str(info.value).count("sampled") == 2  # one line per format
    assert s3.counts()["HEAD"] == 0  # sizes from the listing
    sent = sum(r.bytes_out for r in s3.server.log(s3.name))
    assert sent < total / 10, (sent, total)
