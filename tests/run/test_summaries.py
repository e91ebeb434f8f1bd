"""Per-shard summaries: built from the journal (no read-back), stats as a fallback."""

import json

import numpy as np
import pyarrow as pa
import pytest

from shardwise.run import journal, labelcounts, summaries
from shardwise.run.filestats import FIGURES, FileStats
from shardwise.run.labelcounts import LabelCounts


def _counts(docs: int, nbytes: int, topic: str, fmt: str) -> LabelCounts:
    return LabelCounts(
        docs=docs,
        text_bytes=nbytes,
        classifiers={"topic": {topic: [docs, nbytes]}, "format": {fmt: [docs, nbytes]}},
        pairs={"topic,format": {topic: {fmt: [docs, nbytes]}}},
    )


def test_a_summary_round_trips_tasks_and_cells():
    counts = {
        "a/1.jsonl": _counts(3, 30, "Health", "FAQ"),
        "a/2.jsonl": _counts(2, 10, "Travel", "FAQ"),
        "b/1.jsonl": _counts(4, 40, "Health", "Listicle"),
    }
    data = summaries.build(
        7,
        [("a/1.jsonl|a/2.jsonl", ["a/1.jsonl", "a/2.jsonl"]), ("b/1.jsonl", ["b/1.jsonl"]),
         ("c/1.jsonl", ["c/1.jsonl"])],
        counts,
    )  # fmt: skip
    s = summaries.parse(data)
    assert (s.shard, s.views, s.pairs) == (7, ["format", "topic", "topic,format"],
                                            [("topic", "format")])  # fmt: skip
    assert s.labels == {"format": ["FAQ", "Listicle"], "topic": ["Health", "Travel"]}
    assert s.task_ids == ["a/1.jsonl|a/2.jsonl", "b/1.jsonl"]
    assert s.task_docs.tolist() == [5, 4]
    assert s.task_bytes.tolist() == [40, 40]
    assert s.incomplete_tasks == ["c/1.jsonl"]
    pair = s.cells.filter(np.array(s.cells["view"].to_numpy() == 2))
    assert pair.to_pydict() == {
        "task": [0, 0, 1],
        "view": [2, 2, 2],
        "a": [0, 1, 0],
        "b": [0, 0, 1],
        "docs": [3, 2, 4],
        "bytes": [30, 10, 40],
        "tokens": [0, 0, 0],  # no training tokenizer counted
    }
    assert s.task_tokens is None


def test_summary_of_a_shard_uses_the_journal_and_reads_stats_only_for_the_rest(tmp_path):
    stats_read = []
    stats = FileStats(docs=3, seconds=1.5, device_name="H100", label_counts=_counts(3, 9, "A", "F"))
    journal.append(tmp_path, 3, journal.Line.of("x/1.jsonl", 3, stats))
    journal.append(tmp_path, 3, journal.Line("x/2.jsonl", 1))  # an older line, without counts

    def read_stats(rel: str) -> bytes:
        stats_read.append(rel)
        if rel == "x/3.jsonl":
            raise FileNotFoundError(rel)
        return json.dumps({"docs": 1, "label_counts": _counts(1, 5, "B", "F").to_json()}).encode()

    files = [("x/1.jsonl", "x/1.jsonl"), ("x/2.jsonl", "x/2.jsonl"), ("x/3.jsonl", "x/3.jsonl")]
    rows = summaries.write_for_shard(tmp_path, 3, files, read_stats)
    assert stats_read == ["x/2.jsonl", "x/3.jsonl"]
    assert rows == {  # every figure (filestats.FIGURES), None where the stats lack it
        "x/1.jsonl": {**dict.fromkeys(FIGURES), "docs": 3, "seconds": 1.5, "device_name": "H100"},
        "x/2.jsonl": {**dict.fromkeys(FIGURES), "docs": 1},
    }
    s = summaries.read(tmp_path, 3)
    assert s.task_ids == ["x/1.jsonl", "x/2.jsonl"]
    assert s.incomplete_tasks == ["x/3.jsonl"]
    assert summaries.summarized_shards(tmp_path) == {3}


def test_a_broken_journal_or_store_never_fails_the_shard(tmp_path):
    (tmp_path / "progress").mkdir()
    (tmp_path / "progress" / "5.jsonl").write_text('{"file": "a", "label_counts": [1]}\n{"fi')

    def read_stats(rel: str) -> bytes:
        raise OSError("store down")

    rows = summaries.write_for_shard(tmp_path, 5, [("a", "a"), ("b", "b")], read_stats)
    s = summaries.read(tmp_path, 5)
    assert rows == {}  # a damaged line is refused (journal.Line), and the store was down
    assert (s.task_ids, s.incomplete_tasks) == ([], ["a", "b"])
    (tmp_path / "summaries" / "6.arrow").write_text("not arrow")
    got, missing = summaries.read_many(tmp_path, [5, 6, 7])
    assert ([g.shard for g in got], missing) == ([5], [6, 7])


def test_token_counts_ride_along_when_the_run_counts_them():
    """``domains.tokenizer``: cells [docs, bytes, tokens], summed per task and per cell."""
    columns = {
        "topic_label_id": pa.array([0, 1, 0], pa.int32()),
        "topic_label": pa.array(["Health", "Travel", "Health"]),
    }
    one = labelcounts.count_labels(columns, np.array([10, 20, 30]), ["topic"],
                                   tokens=np.array([3, 5, 7]))  # fmt: skip
    assert one.classifiers["topic"] == {"Health": [2, 40, 10], "Travel": [1, 20, 5]}
    assert one.tokens == 15
    both = LabelCounts.total([one, one])
    assert both.classifiers["topic"]["Health"] == [4, 80, 20] and both.tokens == 30
    s = summaries.parse(summaries.build(1, [("t", ["a", "b"])], {"a": one, "b": one}))
    assert s.task_tokens.tolist() == [30]
    assert sorted(s.view_cells("topic")["tokens"].to_pylist()) == [10, 20]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("tasks", [{"task_id": "a", "docs": "3"}], "field 'tasks' entries' 'docs' must be counts"),
        ("tasks", [{"docs": 3}], "field 'tasks' entries' 'task_id' must be strings"),
        ("labels", {"topic": [1]}, r"\[labels\]: field 'topic' must be an array of strings"),
        ("view_rows", [[0]], "field 'view_rows' must be an array of pairs of int"),
        ("shard", None, "field 'shard' is missing"),
    ],
)
def test_a_damaged_summary_metadata_is_refused_naming_the_field(field, value, message):
    data = summaries.build(
        3, [("a/1.jsonl", ["a/1.jsonl"])], {"a/1.jsonl": _counts(3, 30, "H", "F")}
    )
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    meta = json.loads(table.schema.metadata[summaries.META_KEY])
    if value is None:
        del meta[field]
    else:
        meta[field] = value
    table = table.replace_schema_metadata({summaries.META_KEY: json.dumps(meta).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(ValueError, match=message) as refused:
        summaries.parse(sink.getvalue().to_pybytes(), "summaries/3.arrow")
    assert str(refused.value).startswith("summaries/3.arrow is not a shardwise summary")
