"""``shardwise retry-array``: the missing shards as NeMo Curator's retry_array.py prints
them, exit 2 on a usage error or a directory that is no run; markers that count as not
done (unreadable, of another assignment) are said on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthrun import write_plan, write_run_json, write_shard_markers

from shardwise.cli.main import main


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
    from shardwise.ops.coverage import compute as coverage
    from shardwise.ops.domains import compute as domains

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
