"""The command line as a whole: every verb documented, pipes closed early are quiet."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from inproc import plan_run

from shardwise.cli import plan
from shardwise.cli.main import build_parser, main


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every ``shardwise <verb>`` parser, nested groups (``shardwise cluster check``) included."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[f"{prefix}{name}"] = sub
                    walk(f"{prefix}{name} ", sub)

    walk("", build_parser())
    return found


@pytest.mark.parametrize("verb", sorted(subcommands()))
def test_every_subcommand_describes_itself_and_each_option(verb):
    parser = subcommands()[verb]
    assert parser.description and len(parser.description) > 20, verb
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        assert action.help, f"shardwise {verb}: {action.option_strings or action.dest} has no help"
    assert "%%" not in parser.format_help(), f"shardwise {verb} --help shows a doubled %"
    assert "%%" not in build_parser().format_help()


def bash(command: str) -> subprocess.CompletedProcess[str]:
    """Run a shell pipeline with this venv's ``shardwise`` first on PATH."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run(
        command,
        shell=True,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        executable="/bin/bash",
    )


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path):
    cfg = plan_run(tmp_path)
    proc = bash(f"shardwise coverage --run-dir {cfg['run_dir']} | head -1")
    assert proc.stdout.startswith("coverage of run run")
    assert proc.stderr == ""
    assert proc.returncode == 0


def test_a_broken_pipe_on_a_long_output_exits_quietly(tmp_path: Path):
    ids = tmp_path / "ids.txt"
    ids.write_text(" ".join(f"task-{i}" for i in range(60_000)))  # ~300 kB out > a pipe buffer
    proc = bash(f"set -o pipefail; shardwise shard-of --total-shards 7 $(cat {ids}) | head -1")
    assert proc.stdout.strip().isdigit()
    assert proc.stderr == ""
    assert proc.returncode == 0


def test_ctrl_c_is_one_line_and_exit_130_not_a_traceback(tmp_path: Path, monkeypatch, capsys):
    """Ctrl-C during `plan --repin` printed a KeyboardInterrupt traceback."""

    def interrupted(*_args, **_kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(plan, "prepare_run", interrupted)
    config = tmp_path / "config.yaml"
    config.write_text("run_dir: run\n")
    assert main(["plan", "--repin", "--configfile", str(config)]) == 130
    err = capsys.readouterr().err
    assert err == (
        "shardwise plan: interrupted (Ctrl-C); nothing is left half-written: run it again to "
        "finish\n"
    )
