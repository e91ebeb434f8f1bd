import pytest

from shardwise.cli.main import main
from shardwise.config import check_shard_params
from shardwise.errors import ConfigError
from shardwise.run.sharding import shard_for_task, shard_range

VECTORS = [
    ("0_0", 3, 0, 0),
    ("0_1", 3, 0, 2),
    ("0_7", 3, 0, 1),
    ("0_7", 3, 1, 2),
    ("abc", 100, 0, 74),
    ("", 10, 0, 2),
]


@pytest.mark.parametrize(("task_id", "total", "minimum", "expected"), VECTORS)
def test_shard_for_task_matches_nemo_curator_vectors(task_id, total, minimum, expected):
    assert shard_for_task(task_id, total, minimum) == expected


def test_shard_of_cli_prints_one_shard_per_line(capsys):
    assert main(["shard-of", "--total-shards", "3", "0_0", "0_1", "0_7"]) == 0
    assert capsys.readouterr().out == "0\n2\n1\n"
    assert main(["shard-of", "--total-shards", "3", "--minimum-shard-index", "1", "0_7"]) == 0
    assert capsys.readouterr().out == "2\n"
    assert main(["shard-of", "--total-shards", "10", ""]) == 0
    assert capsys.readouterr().out == "2\n"
    assert main(["shard-of", "--total-shards", "100", "abc"]) == 0
    assert capsys.readouterr().out == "74\n"


@pytest.mark.parametrize(
    ("total", "minimum", "match"),
    [
        (0, 0, "total_shards must be > 0, got 0"),
        (-3, 0, "total_shards must be > 0, got -3"),
        (True, 0, "total_shards must be an integer > 0, got True"),
        (3.0, 0, "total_shards must be an integer > 0, got 3.0"),
        ("3", 0, "total_shards must be an integer > 0, got '3'"),
        (3, -1, "minimum_shard_index must be >= 0, got -1"),
        (3, False, "minimum_shard_index must be an integer >= 0, got False"),
        (3, 1.5, "minimum_shard_index must be an integer >= 0, got 1.5"),
    ],
)
def test_bad_shard_params_are_refused_with_the_value(total, minimum, match):
    with pytest.raises(ConfigError, match=match):
        check_shard_params(total, minimum)


def test_shard_of_cli_refuses_zero_shards(capsys):
    assert main(["shard-of", "--total-shards", "0", "x"]) == 1
    assert "total_shards must be > 0, got 0" in capsys.readouterr().err


def test_assignment_is_uniform_enough():
    counts = [0] * 10
    for i in range(10_000):
        counts[shard_for_task(f"cc/x/part-{i}.jsonl.gz", 10)] += 1
    assert min(counts) > 900 and max(counts) < 1100


def test_shard_range_covers_minimum_to_minimum_plus_total():
    assert list(shard_range(4, 1)) == [1, 2, 3, 4]
