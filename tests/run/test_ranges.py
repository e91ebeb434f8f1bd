"""Range expressions: the notation of SLURM --array and NeMo Curator's retry_array.py."""

from __future__ import annotations

import random

import pytest

from shardwise.run.ranges import compress, expand, runs


@pytest.mark.parametrize(
    ("numbers", "expression"),
    [
        ([], ""),
        ([7], "7"),
        ([1, 2], "1-2"),
        ([99, 1, 2, 5, 6, 7, 8, 9, 10], "1-2,5-10,99"),
        ([2, 4], "2,4"),
        ([0, 0, 1, 1], "0-1"),
        ([5, 6, 2999], "5-6,2999"),
    ],
)
def test_compress_and_expand_agree(numbers: list[int], expression: str) -> None:
    assert compress(numbers) == expression
    assert expand(expression) == sorted(set(numbers))


def test_runs_are_maximal_and_ascending() -> None:
    assert runs([10, 3, 4, 5, 1]) == [(1, 1), (3, 5), (10, 10)]


def test_round_trip_random_sets() -> None:
    rng = random.Random(3)
    for _ in range(200):
        numbers = set(rng.sample(range(500), rng.randint(0, 120)))
        assert expand(compress(numbers)) == sorted(numbers)


def test_expand_accepts_whitespace_and_overlaps() -> None:
    assert expand(" 5-7 , 1,6-8 ") == [1, 5, 6, 7, 8]


@pytest.mark.parametrize("bad", ["1-", "-3", "a", "1,,2", "3-1", "1-2-3", "+1", "1.5", "\u0661"])
def test_expand_refuses_bad_items(bad: str) -> None:
    with pytest.raises(ValueError, match="range"):
        expand(bad)
