"""``shardwise plan``: what a dry run does first, from the command line; the two changes
(``--repin``, ``--extend``) are refused together and ``--gone`` only goes with
``--extend`` (exit 2, nothing planned)."""

from __future__ import annotations

from pathlib import Path

import yaml
from inproc import TINY, demo_run_config

from shardwise.cli.main import main
from shardwise.demo.corpus import write_corpus


def _config(tmp_path: Path) -> Path:
    write_corpus(tmp_path / "corpus", TINY)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(demo_run_config(tmp_path, total_shards=3)))
    return path


def test_plan_pins_the_run_and_says_how_many_shards(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["plan", "--configfile", str(config)]) == 0
    out = capsys.readouterr().out
    assert out == f"3 shards planned in {tmp_path / 'run'}\n"
    assert (tmp_path / "run" / "run.json").exists()


def test_conflicting_changes_are_refused_before_anything_is_planned(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["plan", "--gone", "keep", "--configfile", str(config)]) == 2
    assert "--gone goes with --extend" in capsys.readouterr().err
    assert main(["plan", "--extend", "--repin", "--configfile", str(config)]) == 2
    assert "--extend and --repin are two different changes" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
