"""Markers: what "done" means for a file and a shard, read in the one way every view uses.

The records' round trips and damaged fields are in ``test_record.py``; here, what a
marker is judged against (the plan, the pinned assignment, the input's rows), how done
shards are found from names alone, and the object-store snapshot a repair edits."""

from __future__ import annotations

from pathlib import Path

from shardwise.run import markers
from shardwise.run.markers import FileMarker, ShardMarker


def _marker(shard: int, **kw) -> ShardMarker:
    return ShardMarker(shard=shard, total_shards=4, minimum_shard_index=0, **kw)


def test_a_file_marker_names_each_way_it_disagrees_with_the_plan_and_the_input():
    marker = FileMarker(file="a.jsonl", task_id="a.jsonl", shard=2, rows=5, finished_at="t")
    assert marker.problems("a.jsonl", "a.jsonl", 2, 5) == []
    assert marker.problems("a.jsonl", "a.jsonl", 2, None) == []  # the input was not read
    assert marker.problems("b.jsonl", "b.jsonl", 3, 6) == [
        "file is 'a.jsonl', the plan says 'b.jsonl'",
        "task_id is 'a.jsonl', the plan says 'b.jsonl'",
        "shard is 2, the plan says 3",
        "says 5 rows, the input has 6",
    ]


def test_a_shard_marker_is_judged_against_its_name_the_pin_and_the_plan():
    within = range(0, 4)
    assert _marker(2, files=3).problems(2, within, 3) == []
    assert _marker(2).problems(2, within, 3) == []  # an older marker: files not compared
    assert _marker(2, files=3).problems(1, range(0, 8), 2) == [
        "shard is 2, run.json says 1",
        "total_shards is 4, run.json says 8",
        "says 3 file(s), the plan has 2",
    ]
    empty = _marker(2, files=0, source="empty")
    assert empty.problems(2, within, 1)[0] == "marked empty, but the plan gives it 1 file(s)"


def test_done_shards_come_from_names_alone_and_read_done_judges_each(tmp_path: Path):
    for shard, files in ((0, 2), (1, 1), (3, 5)):
        markers.write_shard_marker(tmp_path, _marker(shard, files=files))
    markers.write_shard_marker(
        tmp_path, ShardMarker(shard=2, total_shards=9, minimum_shard_index=0)
    )
    (tmp_path / "shards" / "7.done").write_text("{half")  # outside the pinned range
    (tmp_path / "shards" / "notes.txt").write_text("x")
    assert markers.done_shards(tmp_path) == {0, 1, 2, 3, 7}
    (tmp_path / "shards" / "1.done").write_text("{half")
    done = markers.read_done(tmp_path, range(0, 4), {0: 2, 1: 1, 2: 1, 3: 4})
    assert done.shards == {0} and done.unreadable == (1,) and done.stale == (2, 3)
    assert markers.remove_shard_markers(tmp_path, [1, 2, 5]) == [1, 2]
    assert markers.done_shards(tmp_path) == {0, 3, 7}
    assert [markers.shard_of_marker(n) for n in ("12.done", "12.done.tmp", "x.done")] == [
        12,
        None,
        None,
    ]


def test_the_snapshot_of_the_output_s_markers_forgets_what_a_repair_removed(tmp_path: Path):
    assert markers.read_snapshot(tmp_path) is None  # never planned on an object store
    markers.write_snapshot(tmp_path, {"b.jsonl", "a.jsonl"})
    markers.forget_in_snapshot(tmp_path, {"a.jsonl", "gone.jsonl"})
    assert markers.read_snapshot(tmp_path) == {"b.jsonl"}
