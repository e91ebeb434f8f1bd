"""A corpus that changes under a run: grown and shrunk under the same pin (issue 29)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from inproc import label, plan_run, s3_run_config

from shardwise.cli.main import main
from shardwise.errors import RunMismatchError
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage import render as coverage_format
from shardwise.ops.coverage.render import summary_lines
from shardwise.ops.verify import check as verify
from shardwise.planner.extend import extend
from shardwise.run import drift, outputs, plan, retired
from shardwise.run.sharding import shard_for_task
from shardwise.snakefile import prepare_run
from shardwise.store.location import Location

TOTAL = 8


def finished(tmp_path: Path) -> tuple[dict, Path, Path]:
    """A labelled run of the tiny demo (6 files in 8 shards: some shards empty)."""
    cfg = plan_run(tmp_path, total_shards=TOTAL)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    return cfg, run_dir, tmp_path / "labels"


def new_names(table, count_done: int, count_empty: int) -> list[str]:
    """New file names hashed into shards that have work, and into empty ones."""
    used = plan.nonempty_shards(table)
    done, empty = [], []
    for i in range(1000):
        rel = f"cc/new/part-{i:04d}.jsonl"
        (done if shard_for_task(rel, TOTAL, 0) in used else empty).append(rel)
    return done[:count_done] + empty[:count_empty]


def add_files(corpus: Path, names: list[str]) -> None:
    for rel in names:
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(corpus / "wiki/technology/part-0000.jsonl", corpus / rel)


def sidecars(labels: Path) -> dict[str, bytes]:
    return {str(p.relative_to(labels)): p.read_bytes() for p in labels.rglob("*.labels.parquet")}


def dry_run(cfg: dict):
    return prepare_run(cfg, main_process=True, dryrun=True, report=False)


def test_a_grown_corpus_joins_its_shards_and_only_the_new_files_are_labelled(tmp_path, capsys):
    cfg, run_dir, labels = finished(tmp_path)
    before = sidecars(labels)
    table = plan.load(run_dir)
    names = sorted(new_names(table, 1, 1))
    add_files(tmp_path / "corpus", names)
    with pytest.raises(RunMismatchError) as refused:
        dry_run(cfg)
    text = str(refused.value)
    assert f"2 file(s) added ({names[0]!r}, {names[1]!r}), 0 planned file(s) gone" in text
    assert "`shardwise plan --extend --configfile <this config>` takes the new set" in text
    assert not (run_dir / "plan.json").read_text().count(names[0])  # nothing pinned or planned
    cov = coverage.compute(coverage.load_state(run_dir))
    assert (cov.drift.added, cov.drift.added_examples) == (2, tuple(names))
    assert any(line.startswith("input    the input changed") for line in summary_lines(cov))
    report = verify.verify_run(run_dir)
    assert not report.ok and report.input_drift["added"] == 2
    assert main(["verify", "--run-dir", str(run_dir)]) == 1
    assert "fix: `shardwise plan --extend --configfile <config>`" in capsys.readouterr().out

    done = extend(cfg)
    assert (done.added, done.tasks_added, done.gone) == (tuple(names), 2, ())
    shards = {shard_for_task(rel, TOTAL, 0) for rel in names}
    assert set(done.reopened) == shards
    info = dry_run(cfg)  # planned as it is now: no refusal
    assert len(info.shards) == TOTAL
    label(run_dir)
    assert sidecars(labels).items() >= before.items()  # the old sidecars byte-identical
    assert all((labels / outputs.MARKER.rel(rel)).exists() for rel in names)
    assert verify.verify_run(run_dir, complete=True).ok
    cov = coverage.compute(coverage.load_state(run_dir))
    assert (cov.tasks_left, cov.tasks_total, cov.drift.added) == (0, 8, 0)
    pinned = json.loads((run_dir / "run.json").read_text())
    assert pinned["total_shards"] == TOTAL and pinned["task_count"] == 8
    assert [(c["tasks_added"], c["tasks_removed"], c["task_count"]) for c in
            pinned["input_changes"]] == [(2, 0, 8)]  # fmt: skip
    assert (labels / "run.json").read_bytes() == (run_dir / "run.json").read_bytes()
    assert extend(cfg).lines() == ["the input holds the planned files: nothing to take in"]

    more = new_names(plan.load(run_dir), 3, 0)[2:]  # extended twice: two entries
    add_files(tmp_path / "corpus", more)
    assert extend(cfg).tasks_added == 1
    dry_run(cfg)
    label(run_dir)
    assert verify.verify_run(run_dir, complete=True).ok
    pinned = json.loads((labels / "run.json").read_text())
    assert [c["task_count"] for c in pinned["input_changes"]] == [8, 9]


@pytest.mark.parametrize("gone", ["keep", "remove"])
def test_deleted_files_labelled_or_not_are_retired_and_verify_complete_is_ok(tmp_path, gone):
    cfg = plan_run(tmp_path, total_shards=TOTAL)
    run_dir = Path(cfg["run_dir"])
    table = plan.load(run_dir)
    rows = table.to_pydict()
    open_shard = rows["shard"][0]
    label(run_dir, [s for s in plan.nonempty_shards(table) if s != open_shard])
    unlabelled = rows["file"][0]
    labelled = next(f for f, s in zip(rows["file"], rows["shard"], strict=True) if s != open_shard)
    labels = tmp_path / "labels"
    assert (labels / outputs.MARKER.rel(labelled)).exists()
    for rel in (labelled, unlabelled):
        (tmp_path / "corpus" / rel).unlink()
    with pytest.raises(RunMismatchError, match=r"0 file\(s\) added, 2 planned file\(s\) gone"):
        dry_run(cfg)
    report = verify.verify_run(run_dir)
    assert report.inputs_gone == [labelled] and labelled not in report.broken_files
    assert report.files_checked == report.files_marked - 1  # the gone one cannot be read
    assert f"contents checked {report.files_checked} (" in report.summary()
    assert "rows, 1 input(s) gone)" in report.summary()
    with pytest.raises(RunMismatchError, match=rf"1 planned file\(s\) .* \({labelled!r}\): say"):
        extend(cfg)
    done = extend(cfg, gone=gone)
    assert set(done.gone) == {labelled, unlabelled} and done.tasks_removed == 2
    done_shard = rows["shard"][rows["file"].index(labelled)]
    left_open = [f for f, s in zip(rows["file"], rows["shard"], strict=True)
                 if s == open_shard and f != unlabelled]  # fmt: skip
    settled = {done_shard} | (set() if left_open else {open_shard})  # nothing left in it
    assert set(done.reopened) == {open_shard, done_shard} and set(done.settled) == settled
    said = f"; {2 - len(settled)} shard(s) reopened, {len(settled)} with nothing left to label"
    assert said in done.lines()[0]
    dry_run(cfg)
    label(run_dir)
    report = verify.verify_run(run_dir, complete=True)
    assert report.ok, report.lines()
    cov = coverage.compute(coverage.load_state(run_dir))
    assert (cov.tasks_left, cov.tasks_total, cov.files_total) == (0, 4, 4)
    assert cov.throughput.overall.files == 4  # a retired file's stats are not in the rate
    assert "[4 files]" in "\n".join(
        summary_lines(cov) + coverage_format.format_table(cov).splitlines()
    )
    kept = (labels / outputs.SIDECAR.rel(labelled)).exists()
    assert kept == (gone == "keep") and (labelled in retired.load(run_dir)) == kept
    written = [k for k in outputs.kinds() if k.root == "output"]  # the retired file's outputs
    assert report.retired == (len(written) if kept else 0)
    assert not drift.load(run_dir)


def test_an_extension_that_also_changes_settings_is_refused(tmp_path):
    cfg, run_dir, _labels = finished(tmp_path)
    add_files(tmp_path / "corpus", new_names(plan.load(run_dir), 1, 0))
    other = {**cfg, "inference": {**cfg.get("inference", {}), "max_length": 16}}
    with pytest.raises(RunMismatchError, match=r"--extend takes in only a changed input set"):
        extend(other)
    assert json.loads((run_dir / "run.json").read_text())["task_count"] == 6


@pytest.mark.s3
def test_grow_and_shrink_on_s3(tmp_path, s3):
    cfg, corpus = s3_run_config(tmp_path, s3, total_shards=4)
    dry_run(cfg)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    labels = Location(s3.url("labels"), s3.options())
    gone = plan.load(run_dir)["file"][0].as_py()
    corpus.write_bytes("cc/new/a.jsonl", corpus.read_bytes("wiki/technology/part-0000.jsonl"))
    corpus.remove(gone)
    with pytest.raises(RunMismatchError, match=r"1 file\(s\) added .* 1 planned file\(s\) gone"):
        dry_run(cfg)
    done = extend(cfg, gone="remove")
    assert done.added == ("cc/new/a.jsonl",) and done.gone == (gone,)
    assert not labels.exists(outputs.MARKER.rel(gone))
    assert not labels.exists(outputs.SIDECAR.rel(gone))
    dry_run(cfg)
    label(run_dir)
    assert labels.exists(outputs.MARKER.rel("cc/new/a.jsonl"))
    assert verify.verify_run(run_dir, complete=True).ok
    pinned = json.loads(labels.read_bytes("run.json"))
    assert [c["gone_outputs"] for c in pinned["input_changes"]] == ["remove"]


def test_on_s3_coverage_counts_the_labelled_files_of_reopened_and_open_shards(tmp_path, s3):
    """An S3 run partly labelled, then extended so that done shards reopen: coverage's
    file count equals the file markers on the bucket (what the next job skips)."""
    cfg, corpus = s3_run_config(tmp_path, s3, total_shards=4)
    dry_run(cfg)
    run_dir = Path(cfg["run_dir"])
    shards = sorted(plan.nonempty_shards(plan.load(run_dir)))
    label(run_dir, shards[:2])  # two shards done, the others untouched
    labels = Location(s3.url("labels"), s3.options())
    for rel in [f"cc/new/part-{i:04d}.jsonl" for i in range(6)]:  # reopens some done shards
        corpus.write_bytes(rel, corpus.read_bytes("wiki/technology/part-0000.jsonl"))
    done = extend(cfg)
    assert set(done.reopened) & set(shards[:2]), done  # a done shard reopened
    on_bucket = outputs.marked(labels)
    cov = coverage.compute(coverage.load_state(run_dir))
    assert cov.files_done == len(on_bucket) > 0 and cov.docs_done > 0
    dry_run(cfg)  # the planner's fresh snapshot: the same count
    assert coverage.compute(coverage.load_state(run_dir)).files_done == len(on_bucket)
    label(run_dir)
    assert coverage.compute(coverage.load_state(run_dir)).files_done == len(plan.load(run_dir))


def test_an_edited_run_directory_copy_gets_one_fix_that_works(tmp_path, capsys):
    """The run directory's copy edited: what verify finds is measured against it, so the
    only fix it advises is the one --repair does first (restore it), then verify again."""
    _cfg, run_dir, labels = finished(tmp_path)
    edited = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**edited, "total_shards": 9}))
    assert main(["verify", "--run-dir", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "fix: the two run.json copies disagree" in out and "keep the output root's" in out
    assert "measured against the run directory's run.json, which --repair replaces" in out
    assert "removes the markers of" not in out  # no second fix for another run.json
    assert main(["verify", "--run-dir", str(run_dir), "--repair"]) == 0
    assert json.loads((run_dir / "run.json").read_text())["total_shards"] == TOTAL
    assert main(["verify", "--run-dir", str(run_dir), "--complete"]) == 0
    assert (labels / "run.json").read_bytes() == (run_dir / "run.json").read_bytes()


def test_copies_that_disagree_keep_the_one_the_plan_and_markers_vouch_for(tmp_path, capsys):
    """Only the output root's copy edited: it was the one the tool said to keep."""
    cfg, run_dir, labels = finished(tmp_path)
    edited = json.loads((labels / "run.json").read_text())
    (labels / "run.json").write_text(json.dumps({**edited, "total_shards": 9}))
    with pytest.raises(RunMismatchError) as refused:
        dry_run(cfg)
    why = "the plan and 8 shard marker(s) agree with it; with the other, the plan has total_shards"
    assert f"keep the run directory's copy ({why}" in str(refused.value)
    cov = coverage.compute(coverage.load_state(run_dir))
    assert "total_shards 8 -> 9" in cov.copies and "keep the run directory's" in cov.copies
    assert any(line.startswith("run.json the two run.json copies") for line in summary_lines(cov))
    assert main(["verify", "--run-dir", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "fix: the two run.json copies disagree" in out and "--repair` restores" in out
    assert main(["verify", "--run-dir", str(run_dir), "--repair"]) == 0
    assert "restored " + str(labels / "run.json") in capsys.readouterr().out
    assert json.loads((labels / "run.json").read_text())["total_shards"] == TOTAL
    dry_run(cfg)
    assert verify.verify_run(run_dir, complete=True).ok


def test_extending_a_run_never_planned_says_to_plan_it(tmp_path):
    cfg = plan_run(tmp_path, total_shards=TOTAL)
    for run_dir in (tmp_path / "elsewhere", tmp_path / "empty"):
        if run_dir.name == "empty":
            run_dir.mkdir()
        with pytest.raises(RunMismatchError, match=r"is not planned yet: a dry run"):
            extend({**cfg, "run_dir": str(run_dir)})
