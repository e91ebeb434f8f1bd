import json
import multiprocessing
from dataclasses import replace

import pytest

from shardwise.errors import RunMismatchError
from shardwise.run import runjson
from shardwise.run.runjson import RunMeta, create_or_validate, fingerprint
from shardwise.store.location import Location


def meta(**kw):
    base = {
        "total_shards": 8,
        "minimum_shard_index": 0,
        "files_per_task": 1,
        "input_uri": "corpus",
        "output_uri": "labels",
        "task_count": 3,
        "fingerprint": fingerprint(["a", "b", "c"]),
        "classifiers": [("topic", "m/topic", "url_text")],
    }
    base.update(kw)
    return RunMeta.new(**base)


def test_create_then_validate_returns_the_pinned_meta(tmp_path):
    loc = Location(str(tmp_path))
    first = meta()
    assert create_or_validate(loc, first) == first
    again = meta()  # different created_at is information only
    assert create_or_validate(loc, again) == first
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["total_shards"] == 8
    assert data["classifiers"] == [{"name": "topic", "model": "m/topic", "input": "url_text"}]
    assert data["format_version"] == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("total_shards", 9),
        ("minimum_shard_index", 1),
        ("files_per_task", 2),
        ("input_uri", "other"),
        ("output_uri", "elsewhere"),
        ("task_count", 4),
        ("classifiers", (("topic", "m/other", "url_text"),)),
    ],
)
def test_each_pinned_field_mismatch_names_old_and_new(tmp_path, field, value):
    loc = Location(str(tmp_path))
    create_or_validate(loc, meta())
    before = (tmp_path / "run.json").read_bytes()
    with pytest.raises(RunMismatchError) as err:
        create_or_validate(loc, replace(meta(), **{field: value}))
    text = str(err.value)
    assert f"{field}: {getattr(meta(), field)!r} -> {value!r}" in text
    assert "use a new run_dir" in text
    assert (tmp_path / "run.json").read_bytes() == before


def test_changed_input_set_reports_added_and_removed(tmp_path):
    loc = Location(str(tmp_path))
    create_or_validate(loc, meta())
    changed = meta(fingerprint=fingerprint(["a", "b", "d", "e"]), task_count=4)
    with pytest.raises(RunMismatchError, match="input set changed: 2 task\\(s\\) added, 1 removed"):
        create_or_validate(loc, changed, task_change=lambda: (2, 1))


def _racer(path, total, queue):
    try:
        got = create_or_validate(Location(path), meta(total_shards=total))
        queue.put(("ok", got.total_shards))
    except RunMismatchError:
        queue.put(("refused", total))


def test_concurrent_create_one_wins_the_other_validates(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(str(tmp_path), t, queue)) for t in (8, 8, 9, 9)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    results = sorted(queue.get() for _ in procs)
    pinned = json.loads((tmp_path / "run.json").read_text())["total_shards"]
    loser = 9 if pinned == 8 else 8
    assert results == sorted(
        [("ok", pinned), ("ok", pinned), ("refused", loser), ("refused", loser)]
    )
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_read_missing_run_json_says_what_to_do(tmp_path):
    with pytest.raises(RunMismatchError, match="run.json not found: pass the original run dir"):
        runjson.read(Location(str(tmp_path)))


def test_corrupt_run_json_is_named(tmp_path):
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(RunMismatchError, match="is damaged: not a valid shardwise run.json"):
        runjson.read(Location(str(tmp_path)))


def test_fingerprint_ignores_order():
    assert fingerprint(["b", "a"]) == fingerprint(["a", "b"]) != fingerprint(["a"])
