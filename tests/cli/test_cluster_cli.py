"""`shardwise cluster` command line: help texts, refusals, exit codes."""

import pytest
from inproc import plan_run

from shardwise.cli.main import main
from shardwise.slurm import queries


@pytest.mark.parametrize(
    "argv", [["cluster", "--help"], ["cluster", "check", "--help"], ["cluster", "status", "--help"]]
)
def test_every_cluster_command_has_help(argv, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "usage: shardwise cluster" in out


def test_check_options_are_described(capsys):
    with pytest.raises(SystemExit):
        main(["cluster", "check", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for option in ("--profile DIR", "--configfile", "--write-profile DIR", "--format", "--timeout"):
        assert option in out


def test_status_of_a_folder_that_is_not_a_run_exits_2(tmp_path, capsys):
    assert main(["cluster", "status", "--run-dir", str(tmp_path)]) == 2
    assert (
        f"{tmp_path} has no run.json: this run was never planned there" in capsys.readouterr().err
    )


def test_check_with_a_missing_profile_exits_1_naming_it(tmp_path, capsys):
    assert main(["cluster", "check", "--profile", str(tmp_path / "nope")]) == 1
    assert "no such directory" in capsys.readouterr().err


def test_watch_must_be_positive(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["cluster", "status", "--run-dir", str(tmp_path), "--watch", "0"])
    assert "must be a positive integer" in capsys.readouterr().err


def test_retime_without_an_answer_from_squeue_says_so_and_exits_1(tmp_path, capsys, monkeypatch):
    run_dir = plan_run(tmp_path)["run_dir"]
    monkeypatch.setattr(queries, "current_user", lambda: "me")
    monkeypatch.setattr(
        queries, "jobs", lambda *a, **k: queries.Answer(None, "controller down", "failed")
    )
    assert main(["cluster", "retime", "--run-dir", str(run_dir), "--max-minutes", "30"]) == 1
    out = capsys.readouterr().out
    assert "cannot list your jobs (squeue): controller down" in out
    assert "no queued job" not in out  # unknown, not none
