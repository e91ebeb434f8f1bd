"""Moving a run's output to another root: checked before anything is written."""

import shutil
from pathlib import Path

import pytest
from inproc import label, plan_run

from shardwise.cli.main import main
from shardwise.errors import RunMismatchError
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.verify import check as verify
from shardwise.planner.relocate import relocate
from shardwise.run import runjson
from shardwise.snakefile import prepare_run
from shardwise.store.location import Location


@pytest.fixture
def labelled(tmp_path):
    """A labelled run whose output is at <tmp>/labels."""
    cfg = plan_run(tmp_path, total_shards=3)
    label(Path(cfg["run_dir"]))
    return cfg


def pinned_output(root: Path) -> str:
    return runjson.RunMeta.from_json((root / "run.json").read_bytes(), "x").output_uri


def test_a_complete_copy_is_relocated_and_the_run_goes_on_there(tmp_path, labelled, capsys):
    run_dir, old, new = Path(labelled["run_dir"]), tmp_path / "labels", tmp_path / "bigger"
    cfg = {**labelled, "output": {"uri": str(new)}}
    shutil.copytree(old, new)
    with pytest.raises(RunMismatchError) as info:  # the pinned root refuses another one
        prepare_run(cfg, main_process=True, dryrun=True, report=False)
    files = len(list(old.rglob("*.done")))
    assert f"{files:,} file(s) of this run are already labelled" in str(info.value)  # not 2x
    assert main(["relocate", "--run-dir", str(run_dir), "--to", str(new)]) == 0
    out = capsys.readouterr().out
    assert f"of {old} are in {new}" in out
    assert f"now set output.uri: {new} in the config" in out
    assert pinned_output(run_dir) == pinned_output(new) == str(new)
    prepare_run(cfg, main_process=True, dryrun=True, report=False)  # accepted now
    cov = coverage.compute(coverage.load_state(run_dir))
    assert cov.tasks_left == 0 and cov.shards_remaining == 0
    shutil.rmtree(old)
    assert verify.verify_run(run_dir, complete=True).ok


def test_an_incomplete_copy_is_refused_naming_what_is_missing_and_nothing_is_written(
    tmp_path, labelled
):
    run_dir, old, new = Path(labelled["run_dir"]), tmp_path / "labels", tmp_path / "bigger"
    shutil.copytree(old, new)
    gone = sorted(new.rglob("*.labels.parquet"))[0]
    gone.unlink()
    before = {p: p.read_bytes() for p in [run_dir / "run.json", new / "run.json"]}
    with pytest.raises(RunMismatchError) as info:
        relocate(run_dir, str(new))
    message = str(info.value)
    assert f"{new} is not a complete copy of {old}: 1 file(s) missing" in message
    assert str(gone.relative_to(new)) in message and "nothing was changed" in message
    assert {p: p.read_bytes() for p in before} == before
    with pytest.raises(RunMismatchError, match="holds no files: copy the output there first"):
        relocate(run_dir, str(tmp_path / "empty"))


def test_an_interrupted_relocate_is_finished_by_running_it_again(tmp_path, labelled, monkeypatch):
    run_dir, new = Path(labelled["run_dir"]), tmp_path / "bigger"
    shutil.copytree(tmp_path / "labels", new)
    real = Location.write_bytes
    calls = []

    def once_then_stop(self, rel, data):
        calls.append(self.uri)
        if len(calls) == 2:
            raise KeyboardInterrupt  # after the new root's copy, before the run dir's
        return real(self, rel, data)

    monkeypatch.setattr(Location, "write_bytes", once_then_stop)
    with pytest.raises(KeyboardInterrupt):
        relocate(run_dir, str(new))
    monkeypatch.undo()
    cfg = {**labelled, "output": {"uri": str(new)}}
    with pytest.raises(RunMismatchError, match="the two run.json copies disagree"):
        prepare_run(cfg, main_process=True, dryrun=True, report=False)
    relocate(run_dir, str(new))
    prepare_run(cfg, main_process=True, dryrun=True, report=False)
