"""A state change interrupted anywhere leaves the old state or the new, never a mix that
ends in a "done" run with planned tasks left (issue 19).

Each scenario is run once per state change it makes (an atomic write's rename, an
unlink, a folder removed or moved): the k-th is interrupted as Ctrl-C would (before it
happens), then the next command runs as an operator would. It may refuse with a fix;
it may finish the work; it may never leave planned tasks neither labelled nor
quarantined behind a run every shard of which counts as done.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from inproc import demo_run_config, label, plan_run

from shardwise.errors import RunMismatchError
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.verify import check as verify
from shardwise.ops.verify import repair as verify_repair
from shardwise.planner.extend import extend
from shardwise.run import plan as run_plan
from shardwise.run import quarantine, runjson
from shardwise.snakefile import prepare_run

#: More than any scenario here makes: the loop ends at the first k that is not reached.
MAX_CHANGES = 80


class Interrupt:
    """Counts state changes; raises KeyboardInterrupt at the k-th (before it happens)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, k: int) -> None:
        self.k, self.seen, self.fired = k, 0, False
        for name in ("replace", "unlink", "rename"):
            monkeypatch.setattr(pathlib.Path, name, self._wrap(getattr(pathlib.Path, name)))
        monkeypatch.setattr(shutil, "rmtree", self._wrap(shutil.rmtree))

    def _wrap(self, real: Callable) -> Callable:
        def changed(*args, **kwargs):
            self.seen += 1
            if self.seen == self.k:
                self.fired = True
                raise KeyboardInterrupt(f"interrupted at state change {self.k}")
            return real(*args, **kwargs)

        return changed


def complete(run_dir: Path) -> coverage.Coverage:
    return coverage.compute(coverage.load_state(run_dir))


def finish(cfg: dict) -> str:
    """What an operator does next: plan (re-pin if refused, as the message says) and label.

    Returns "refused" when the plain plan was refused (the re-pin then finished it).
    """
    outcome = "completed"
    try:
        prepare_run(cfg, main_process=True, dryrun=True, report=False)
    except RunMismatchError as e:
        assert "--repin" in str(e) or "re-pin" in str(e), str(e)
        outcome = "refused"
        prepare_run(cfg, main_process=True, dryrun=True, report=False, repin=True)
    label(Path(cfg["run_dir"]))
    return outcome


def run_each_interruption(scenario: Callable[[Path, pytest.MonkeyPatch, int], None],
                          tmp_path: Path) -> list[str]:  # fmt: skip
    """Run ``scenario`` with the k-th state change interrupted, for every k it reaches."""
    outcomes = []
    for k in range(1, MAX_CHANGES):
        with pytest.MonkeyPatch.context() as mp:
            fired = scenario(tmp_path / f"k{k}", mp, k)
        if not fired:
            return outcomes
        outcomes.append(k)
    pytest.fail(f"more than {MAX_CHANGES} state changes")


def _repin(root: Path, mp: pytest.MonkeyPatch, k: int) -> bool:
    cfg = plan_run(root, total_shards=5)
    cfg = {**cfg, "sharding": {"total_shards": 3}}
    interrupt = Interrupt(mp, k)
    with contextlib.suppress(KeyboardInterrupt):
        prepare_run(cfg, main_process=True, dryrun=True, report=False, repin=True)
    mp.undo()
    finish(cfg)
    cov = complete(Path(cfg["run_dir"]))
    assert (cov.total_shards, cov.tasks_left, cov.shards_remaining) == (3, 0, 0), k
    assert verify.verify_run(Path(cfg["run_dir"]), complete=True).ok, k
    return interrupt.fired


def _release(root: Path, mp: pytest.MonkeyPatch, k: int) -> bool:
    cfg = plan_run(root, total_shards=2)
    run_dir = Path(cfg["run_dir"])
    rel = run_plan.load(run_dir)["file"][0].as_py()
    quarantine.add(run_dir, [rel], "looked broken")
    label(run_dir)
    interrupt = Interrupt(mp, k)
    with contextlib.suppress(KeyboardInterrupt):
        quarantine.release(run_dir, [rel])
    mp.undo()
    finish(cfg)
    cov = complete(run_dir)
    assert cov.tasks_left == 0 and cov.shards_remaining == 0, k
    labelled = (root / "labels" / f"{rel}.done").exists()
    assert labelled != (rel in quarantine.load(run_dir)), k  # labelled, or still left out
    return interrupt.fired


def _repair(root: Path, mp: pytest.MonkeyPatch, k: int) -> bool:
    cfg = plan_run(root, total_shards=2)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    rel = run_plan.load(run_dir)["file"][0].as_py()
    (root / "labels" / f"{rel}.labels.parquet").unlink()  # damage: a sidecar gone
    report = verify.verify_run(run_dir)
    assert rel in report.broken_files
    interrupt = Interrupt(mp, k)
    with contextlib.suppress(KeyboardInterrupt):
        verify_repair.repair(run_dir, report)
    mp.undo()
    finish(cfg)
    if not verify.verify_run(run_dir).ok:  # an interrupted repair: the next one finishes it
        verify_repair.repair(run_dir, verify.verify_run(run_dir))
        finish(cfg)
    assert complete(run_dir).tasks_left == 0, k
    assert verify.verify_run(run_dir, complete=True).ok, k
    return interrupt.fired


def _extend(root: Path, mp: pytest.MonkeyPatch, k: int) -> bool:
    """Extended twice: once by a file, then (interrupted) by two more with a labelled
    file deleted."""
    cfg = plan_run(root, total_shards=4)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    corpus = root / "corpus"
    shutil.copy(corpus / "wiki/technology/part-0000.jsonl", corpus / "wiki/technology/x.jsonl")
    extend(cfg)
    prepare_run(cfg, main_process=True, dryrun=True, report=False)
    label(run_dir)
    before = {p: p.read_bytes() for p in (root / "labels").rglob("*.labels.parquet")}
    for name in ("cc/new/a.jsonl", "wiki/new/b.jsonl"):
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(corpus / "wiki/technology/part-0000.jsonl", corpus / name)
    gone = run_plan.load(run_dir)["file"][0].as_py()
    (corpus / gone).unlink()
    interrupt = Interrupt(mp, k)
    with contextlib.suppress(KeyboardInterrupt):
        extend(cfg, gone="remove")
    mp.undo()
    try:
        prepare_run(cfg, main_process=True, dryrun=True, report=False)
    except RunMismatchError as e:  # the old state: the refusal says to extend (again)
        assert "shardwise plan --extend" in str(e), str(e)
        extend(cfg, gone="remove")
        prepare_run(cfg, main_process=True, dryrun=True, report=False)
    label(run_dir)
    cov = complete(run_dir)
    assert (cov.tasks_left, cov.shards_remaining, cov.tasks_total) == (0, 0, 8), k
    assert verify.verify_run(run_dir, complete=True).ok, k
    changes = runjson.read_run_dir(run_dir).input_changes
    assert [(c.tasks_added, c.tasks_removed) for c in changes] == [(1, 0), (2, 1)], k
    after = {p: p.read_bytes() for p in (root / "labels").rglob("*.labels.parquet")}
    assert {p: b for p, b in before.items() if gone not in str(p)}.items() <= after.items(), k
    return interrupt.fired


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario", [_repin, _release, _repair, _extend], ids=["repin", "release", "repair", "extend"]
)
def test_an_interrupted_state_change_never_leaves_a_done_run_with_tasks_left(tmp_path, scenario):
    interrupted_at = run_each_interruption(scenario, tmp_path)
    assert len(interrupted_at) >= 2, interrupted_at  # every scenario changes several files


def test_a_plan_of_another_assignment_is_rebuilt_at_the_next_plan(tmp_path):
    """The issue's case: run.json re-pinned (63 -> 50 here: 5 -> 3), the plan left behind."""
    cfg = plan_run(tmp_path, total_shards=5)
    run_dir = Path(cfg["run_dir"])
    stale_plan = (run_dir / "plan.parquet").read_bytes(), (run_dir / "plan.json").read_bytes()
    cfg = {**cfg, "sharding": {"total_shards": 3}}
    prepare_run(cfg, main_process=True, dryrun=True, report=False, repin=True)
    (run_dir / "plan.parquet").write_bytes(stale_plan[0])  # the rewrite never happened
    (run_dir / "plan.json").write_bytes(stale_plan[1])
    with pytest.raises(RunMismatchError, match=r"built for another assignment .*`snakemake -n`"):
        coverage.load_state(run_dir)
    report = verify.verify_run(run_dir)
    assert any("built for another assignment" in p.what for p in report.problems)
    info = prepare_run(cfg, main_process=True, dryrun=True, report=False)
    assert "the cached plan was built for total_shards 5" in " ".join(info.messages)
    label(run_dir)
    cov = complete(run_dir)
    assert (cov.total_shards, cov.tasks_left, cov.shards_remaining) == (3, 0, 0)


def test_shard_markers_of_another_assignment_are_not_done_and_planning_removes_them(tmp_path):
    cfg = plan_run(tmp_path, total_shards=3)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    shard = min(run_plan.nonempty_shards(run_plan.load(run_dir)))
    marker = run_dir / "shards" / f"{shard}.done"
    body = json.loads(marker.read_text())
    marker.write_text(json.dumps({**body, "files": body["files"] + 1}))  # other files
    cov = complete(run_dir)
    assert cov.shards_remaining == 1 and cov.stale_markers == (str(marker),)
    info = prepare_run(cfg, main_process=True, dryrun=True, report=False)
    assert any("removed 1 shard marker(s) that do not match the plan" in m for m in info.messages)
    # its files all have their markers, so planning marks it done again, with the right count
    again = json.loads(marker.read_text())
    assert (again["files"], again["source"]) == (body["files"], "remote")
    assert complete(run_dir).tasks_left == 0


def test_a_second_set_up_on_the_same_output_is_refused_naming_the_settings(tmp_path):
    cfg = plan_run(tmp_path, total_shards=3)
    label(Path(cfg["run_dir"]))
    other = demo_run_config(tmp_path, 3)
    other["run_dir"] = str(tmp_path / "run-b")
    other["input"] = {**other["input"], "text_field": "url"}
    other["inference"] = {**other.get("inference", {}), "max_length": 16}
    with pytest.raises(RunMismatchError) as info:
        prepare_run(other, main_process=True, dryrun=True, report=False)
    text = str(info.value)
    assert "labels/run.json pins a different run" in text
    assert "labelling.text_field: 'text' -> 'url'" in text
    assert "labelling.max_length: 512 -> 16" in text
    assert "Use a new output.uri (and run_dir) for a different set-up" in text
    assert not (tmp_path / "run-b" / "run.json").exists()  # refused before anything pinned
