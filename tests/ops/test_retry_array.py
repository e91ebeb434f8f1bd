"""retry-array: NeMo Curator retry_array.py lines; the reference vectors are authoritative."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthrun import write_plan, write_run_json, write_shard_markers

from shardwise.cli.main import main
from shardwise.ops.retry_array import missing_shards, retry_lines
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


def _run(tmp_path: Path, total: int, minimum: int, done: set[int]) -> Path:
    run_dir = tmp_path / "run"
    write_run_json(run_dir, total, minimum)
    write_plan(run_dir, [], total=total, minimum=minimum)
    write_shard_markers(run_dir, done, total=total, minimum=minimum)
    return run_dir


def test_cli_prints_exact_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _run(tmp_path, 4, 1, {1, 3, 99})  # 99: a stray marker, outside the run
    assert main(["retry-array", "--run-dir", str(run_dir)]) == 0
    assert capsys.readouterr().out.splitlines() == ["2,4"]
    args = ["retry-array", "--run-dir", str(run_dir), "--format", "fields"]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines() == ["2,4 0 1 4"]
    assert main([*args, "--max-array-size", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == ["0 2 1 4", "0 4 1 4"]


def test_cli_all_done_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _run(tmp_path, 3, 0, {0, 1, 2})
    assert main(["retry-array", "--run-dir", str(run_dir), "--format", "fields"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "extra",
    [["--max-array-size", "10"], ["--format", "fields", "--max-array-size", "0"],
     ["--format", "fields", "--max-array-size", "-5"]],
)  # fmt: skip
def test_cli_usage_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    run_dir = _run(tmp_path, 3, 0, {0})
    with pytest.raises(SystemExit) as exc:
        main(["retry-array", "--run-dir", str(run_dir), *extra])
    assert exc.value.code == 2
    assert "--max-array-size" in capsys.readouterr().err


def test_cli_missing_run_json_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["retry-array", "--run-dir", str(tmp_path / "nowhere")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "original run directory" in captured.err


def test_a_stale_marker_of_another_assignment_is_done_nowhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardwise.ops import coverage, domains

    run_dir = _run(tmp_path, 4, 0, {0, 1, 2})
    stale = {"shard": 2, "total_shards": 7, "minimum_shard_index": 0, "files": 0, "docs": 0}
    (run_dir / "shards" / "2.done").write_text(json.dumps(stale))  # a re-pin left it
    cov = coverage.compute(coverage.load_state(run_dir))
    assert (cov.shards_done, cov.incomplete_shards) == (2, "2-3")
    assert domains.load(run_dir).shards_done == 2
    assert main(["retry-array", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == [cov.incomplete_shards]
    assert "shard marker(s) 2 are of another assignment" in out.err
