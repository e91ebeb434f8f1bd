"""retry-array: NeMo Curator retry_array.py lines; the reference vectors are authoritative."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardwise.ops.jobs.retry_array import missing_shards, retry_lines
from shardwise.run.markers import done_shards


def _missing(total: int, minimum: int, done: set[int]) -> list[int]:
    return missing_shards(done, total_shards=total, minimum_shard_index=minimum)


def test_vector_total_100() -> None:
    done = {0, 3, 4, *range(11, 99)}
    missing = _missing(100, 0, done)
    assert retry_lines(missing, total_shards=100, minimum_shard_index=0, fmt="fields") == [
        "1-2,5-10,99 0 0 100"
    ]
    assert retry_lines(missing, total_shards=100, minimum_shard_index=0) == ["1-2,5-10,99"]


def test_vector_minimum_one() -> None:
    missing = _missing(4, 1, {1, 3})
    assert missing == [2, 4]
    assert retry_lines(missing, total_shards=4, minimum_shard_index=1, fmt="fields") == [
        "2,4 0 1 4"
    ]
    assert retry_lines(
        missing, total_shards=4, minimum_shard_index=1, max_array_size=2, fmt="fields"
    ) == ["0 2 1 4", "0 4 1 4"]


def test_vector_windows_of_1000() -> None:
    missing = _missing(3000, 0, set(range(3000)) - {1, 2, 1005, 1006, 2999})
    assert retry_lines(
        missing, total_shards=3000, minimum_shard_index=0, max_array_size=1000, fmt="fields"
    ) == ["1-2 0 0 3000", "5-6 1000 0 3000", "999 2000 0 3000"]


def test_nothing_missing_gives_no_lines() -> None:
    assert retry_lines([], total_shards=5, minimum_shard_index=0, fmt="fields") == []


def test_refuses_shards_outside_the_run_and_bad_sizes() -> None:
    with pytest.raises(ValueError, match="outside"):
        retry_lines([0], total_shards=4, minimum_shard_index=1)
    with pytest.raises(ValueError, match="positive"):
        retry_lines([1], total_shards=4, minimum_shard_index=1, max_array_size=0, fmt="fields")
    with pytest.raises(ValueError, match="fields"):
        retry_lines([1], total_shards=4, minimum_shard_index=1, max_array_size=2)


def test_listing_ignores_foreign_names(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    for name in ("3.done", "12.done", ".3.done.tmp-1", "7.done.partial", "x.done", "4.log"):
        (shards / name).write_text("{}")
    assert done_shards(tmp_path) == {3, 12}
    assert done_shards(tmp_path / "absent") == set()
