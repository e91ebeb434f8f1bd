"""`shardwise cluster` command line: help texts, refusals, exit codes."""

import pytest

from shardwise.cli.main import main


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
