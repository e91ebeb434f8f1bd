"""Coverage: counts, per-category completion, skew flags, formats and the CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from inproc import label, plan_run
from synthrun import make_run, stats_for, write_run_json

from shardwise.cli.main import main
from shardwise.errors import RunMismatchError
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage import skew
from shardwise.ops.coverage.render import format_table, quality_lines
from shardwise.ops.verify import check as verify
from shardwise.planner import inflight
from shardwise.run import failures
from shardwise.run.ranges import compress
from shardwise.run.sharding import shard_for_task

JSON_KEYS = {
    "shards_total", "shards_done", "shards_empty", "shards_remaining", "tasks_total",
    "tasks_done", "files_total", "files_done", "docs_done", "tokens_done",
    "incomplete_shards", "categories", "throughput", "eta",
}  # fmt: skip


def _files(categories: int, per_category: int) -> list[str]:
    return [
        f"src/cat{c}/part-{i:04d}.jsonl" for c in range(categories) for i in range(per_category)
    ]


def _small_run(tmp_path: Path) -> tuple[Path, list[str], set[str]]:
    """12 files over 3 categories in 8 shards; shards 0-3 complete plus one stray file."""
    files = _files(3, 4)
    total = 8
    reached = {f for f in files if shard_for_task(f, total) < 4}
    stray = next(f for f in sorted(files) if shard_for_task(f, total) >= 4)
    done = reached | {stray}
    run_dir = make_run(
        tmp_path, files, total=total, done_files=done, sizes={f: 1000 for f in files},
        name="small",
    )  # fmt: skip
    return run_dir, files, done


def test_counts(tmp_path: Path) -> None:
    run_dir, files, done = _small_run(tmp_path)
    cov = coverage.compute(coverage.load_state(run_dir), gpus=2)
    shard_of = {f: shard_for_task(f, 8) for f in files}
    marked = {s for s in range(8) if all(f in done for f in files if shard_of[f] == s)}
    assert cov.name == "small"
    assert (cov.shards_total, cov.shards_done) == (8, len(marked))
    assert cov.shards_remaining == 8 - len(marked)
    assert cov.shards_empty == 8 - len(set(shard_of.values()))
    assert (cov.files_total, cov.files_done) == (12, len(done))
    assert (cov.tasks_total, cov.tasks_done) == (12, len(done))
    assert cov.docs_done == 100 * len(done)
    assert cov.tokens_done == 1000 * len(done)
    assert cov.bytes_done == 1000 * len(done)
    assert cov.incomplete_shards == compress(set(range(8)) - marked)
    done_in = {f"src/cat{c}": sum(f.startswith(f"src/cat{c}/") for f in done) for c in range(3)}
    assert [c.name for c in cov.categories] == sorted(done_in, key=lambda n: (done_in[n], n))
    # ETA: 10 s per 1000-byte file -> 100 B/s per GPU; two GPUs.
    assert cov.eta is not None and cov.eta.unit == "bytes"
    assert cov.eta.seconds == pytest.approx((12 - len(done)) * 1000 / (100 * 2))


def test_docs_prefer_shard_markers_and_fill_in_from_stats(tmp_path: Path) -> None:
    run_dir, _, done = _small_run(tmp_path)
    # Without stats, only the shard markers count (the stray file's shard is not done).
    state = coverage.load_state(run_dir, read_stats=lambda: ())
    cov = coverage.compute(state)
    assert cov.docs_done == 100 * (len(done) - 1)
    assert cov.tokens_done is None and cov.throughput is None and cov.eta is None
    assert cov.files_done == len(done) - 1  # no per-file markers listed


def test_read_stats_and_output_markers_are_injectable(tmp_path: Path) -> None:
    files = _files(1, 4)
    run_dir = make_run(tmp_path, files, total=2)
    target = files[0]
    state = coverage.load_state(
        run_dir,
        read_stats=lambda: [stats_for(target, shard_for_task(target, 2), docs=42)],
        output_markers={target},
    )
    cov = coverage.compute(state)
    assert (cov.files_done, cov.docs_done, cov.tokens_done) == (1, 42, 420)
    assert cov.throughput is not None and cov.throughput.files == 1


def _skew_run(tmp_path: Path, *, always_failing: bool) -> coverage.Coverage:
    """10 categories x 100 files in 50 shards; the first 25 shards have run.

    ``always_failing``: every file of src/cat0 fails; else 10% of files fail at random.
    """
    files = _files(10, 100)
    total = 50
    rng = random.Random(11)
    reached = [f for f in files if shard_for_task(f, total) < 25]
    if always_failing:
        done = {f for f in reached if not f.startswith("src/cat0/")}
    else:
        done = {f for f in reached if rng.random() >= 0.1}
    return coverage.compute(coverage.load_state(make_run(tmp_path, files, total=total,
                                                         done_files=done)))  # fmt: skip


def test_skew_flags_a_category_that_always_fails(tmp_path: Path) -> None:
    cov = _skew_run(tmp_path, always_failing=True)
    assert cov.skew_flagged == ("src/cat0",)
    assert cov.categories[0].name == "src/cat0" and cov.categories[0].percent == 0.0
    assert cov.categories[0].flagged
    assert not any(c.flagged for c in cov.categories[1:])


def test_skew_random_failures_are_not_flagged(tmp_path: Path) -> None:
    cov = _skew_run(tmp_path, always_failing=False)
    assert 30 < cov.overall_percent < 60
    assert cov.skew_flagged == ()


def test_skew_rule_is_the_binomial_interval() -> None:
    # p = 0.5, n = 100: half-width 2.576 * 0.05 = 0.1288.
    done = np.array([37, 38, 62, 63, 0])
    total = np.array([100, 100, 100, 100, 49])
    assert skew.skew_flags(done, total, 0.5).tolist() == [True, False, False, True, False]


def test_effective_tasks() -> None:
    # One task per shard: n_eff = n. Four tasks in each of two shards: n_eff = 2.
    cat = np.array([0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1])
    shard = np.array([0, 1, 2, 0, 0, 0, 0, 1, 1, 1, 1])
    assert skew.effective_tasks(cat, shard, 2).tolist() == [3.0, 2.0]


def test_category_regex_rederives(tmp_path: Path) -> None:
    files = ["cc/2024/a/x.jsonl", "cc/2024/b/y.jsonl", "wiki/en/z.jsonl"]
    run_dir = make_run(tmp_path, files, total=2, done_files=files)
    state = coverage.load_state(run_dir)
    by_plan = coverage.compute(state)
    assert {c.name for c in by_plan.categories} == {"cc/2024", "wiki/en"}
    by_group = coverage.compute(state, category_regex=r"^[^/]+/[^/]+/([^/]+)/")
    assert {c.name for c in by_group.categories} == {"a", "b", coverage.UNMATCHED}
    by_match = coverage.compute(state, category_regex=r"^[^/]+")
    assert {(c.name, c.tasks_total) for c in by_match.categories} == {("cc", 2), ("wiki", 1)}


def test_errors_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(RunMismatchError, match="original run directory"):
        coverage.load_state(tmp_path)
    write_run_json(tmp_path, 4)
    with pytest.raises(RunMismatchError, match=r"plan\.parquet"):
        coverage.load_state(tmp_path)


def test_cli_json_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, _, done = _small_run(tmp_path)
    code = main(["coverage", "--run-dir", str(run_dir), "--format", "json", "--gpus", "2"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= JSON_KEYS
    assert doc["files_done"] == len(done)
    assert doc["eta"]["gpus"] == 2
    for entry in doc["categories"].values():
        assert set(entry) == {"tasks_total", "tasks_done", "percent", "flagged"}


def test_cli_table_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _files(2, 2)
    run_dir = make_run(tmp_path, files, total=2, done_files=files, name="tiny")
    assert main(["coverage", "--run-dir", str(run_dir), "--gpus", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"coverage of run tiny ({run_dir})"
    assert lines[1] == "shards   2 / 2 done (100.0%)   0 remaining   0 empty"
    assert lines[2] == "tasks    4 / 4 (100.0%)"
    assert lines[3] == "files    4 / 4 (100.0%)   4.00 kB / 4.00 kB"
    assert lines[4] == "labelled 400 docs   4,000 tokens"
    assert "left     nothing: every shard is done" in lines
    assert lines[-3:] == [
        "category        done       tasks       %",
        "src/cat0           2           2  100.0%",
        "src/cat1           2           2  100.0%",
    ]


def test_cli_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, _, _ = _small_run(tmp_path)
    assert main(["coverage", "--run-dir", str(run_dir), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### Coverage of run `small`")
    assert "| category | done | tasks | % | skew |" in out


def test_cli_missing_run_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["coverage", "--run-dir", str(tmp_path)]) == 2
    assert "original run directory" in capsys.readouterr().err


def test_eta_divides_by_what_the_last_invocation_could_run_at_once(tmp_path: Path) -> None:
    run_dir, _, _ = _small_run(tmp_path)
    state = coverage.load_state(run_dir)
    assert state.parallel == (1, "GPU")  # never run by snakemake
    inflight.Submitter(workdir="w", snakefile="s", cluster=True, parallel=450).record(run_dir)
    cov = coverage.compute(coverage.load_state(run_dir))
    assert (cov.eta.gpus, cov.eta.per) == (450, "GPU")
    inflight.Submitter(workdir="w", snakefile="s", cluster=False, parallel=2).record(run_dir)
    cov = coverage.compute(coverage.load_state(run_dir))
    assert (cov.eta.gpus, cov.eta.per) == (2, "local job")
    assert any(line.startswith("ETA") and " on 2 local jobs (" in line for line in
               format_table(cov).splitlines())  # fmt: skip
    cov = coverage.compute(coverage.load_state(run_dir), gpus=8)  # --gpus
    assert (cov.eta.gpus, cov.eta.per) == (8, "GPU")


def test_empty_plan(tmp_path: Path) -> None:
    cov = coverage.compute(coverage.load_state(make_run(tmp_path, [], total=3)))
    assert (cov.shards_done, cov.shards_empty, cov.files_total, cov.tasks_total) == (3, 3, 0, 0)
    assert cov.incomplete_shards == "" and cov.categories == ()
    assert "left     nothing: every shard is done" in format_table(cov)


def test_throughput_comes_from_shard_markers_without_reading_those_files_stats(tmp_path):
    files = [f"cc/science/part-{i}.jsonl" for i in range(8)]
    run_dir = make_run(tmp_path, files, total=2, done_files=files)
    shard = shard_for_task(files[0], 2)
    mine = [f for f in files if shard_for_task(f, 2) == shard]
    marker = run_dir / "shards" / f"{shard}.done"
    body = json.loads(marker.read_text())
    body["file_stats"] = {
        f: {"docs": 50, "tokens": 500, "seconds": 5.0, "bytes": 1000, "device_name": "B200",
            "finished_at": "2026-01-02T00:00:00+00:00"}
        for f in mine
    }  # fmt: skip
    marker.write_text(json.dumps(body))
    for f in mine:  # would count as unreadable (and drop the file) if they were read
        (tmp_path / "output" / f"{f}.stats.json").write_text("{not json")
    cov = coverage.compute(coverage.load_state(run_dir))
    devices = {d.device_name: d.files for d in cov.throughput.devices}
    assert devices == {"B200": len(mine), "NVIDIA H100 80GB HBM3": len(files) - len(mine)}
    assert cov.tokens_done == 500 * len(mine) + 1000 * (len(files) - len(mine))


def test_failing_shards_say_why_and_name_their_files_interrupted_ones_are_not_failing(
    tmp_path: Path,
) -> None:
    run_dir, files, done = _small_run(tmp_path)
    open_shards = sorted({shard_for_task(f, 8) for f in files if f not in done})
    bad, stopped, shared = open_shards[0], open_shards[1], open_shards[2:]
    failed = [{"file": "src/cat0/part-0001.jsonl", "error": "/c/src/cat0/part-0001.jsonl: bad\nx"}]
    hint = "`shardwise quarantine`"
    failures.record_failure(
        run_dir, bad, failed, cause=failures.Cause("input", f"1 of 1 file(s) failed: bad {hint}")
    )
    failures.record_failure(run_dir, stopped, [], cause=failures.INTERRUPTED)
    typo = failures.Cause("config", "input.text_field 'body' is in no row of any file; ...", True)
    for shard in shared:
        failures.record_failure(run_dir, shard, [{"file": "f", "error": "e"}], cause=typo)
    cov = coverage.compute(coverage.load_state(run_dir))
    assert (cov.shards_failing, cov.shards_interrupted) == (1 + len(shared), 1)
    assert cov.failing_files == (
        ("src/cat0/part-0001.jsonl", bad, "/c/src/cat0/part-0001.jsonl: bad"),
    )
    lines = format_table(cov).splitlines()
    assert f"   {1 + len(shared)} failing   1 interrupted" in lines[1]
    assert f"failing  {len(shared)} shard(s) (shards {compress(shared)}): {typo.reason}" in lines
    assert (
        f"files    1 failing: src/cat0/part-0001.jsonl (shard {bad}). Fix a file and run again, "
        f"or leave it out: `shardwise quarantine --run-dir {run_dir} FILE --reason TEXT`"
    ) in lines
    assert any(line.startswith("interrupted 1 shard(s) were stopped by a signal") for line in lines)


def test_empty_texts_are_in_the_without_text_share() -> None:
    assert quality_lines({"missing_text": 1, "null_texts": 2, "empty_texts": 3}, 10) == [
        "data     6 without text (60.0%): 1 missing the field, 2 null, 3 empty or whitespace "
        "only  ! check input.text_field"
    ]


def test_the_fidelity_and_recheck_lines_sum_each_files_figures(tmp_path: Path, capsys) -> None:
    cfg = plan_run(tmp_path, total_shards=2)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)  # the fake engine reports 1e-7 expected flips per document
    cov = coverage.compute(coverage.load_state(run_dir))
    [topic] = [f for f in cov.fidelity if f.classifier == "topic"]
    assert topic.residual_share == pytest.approx(1e-7)
    line = next(ln for ln in format_table(cov).splitlines() if ln.startswith("fidelity topic"))
    assert "labelled from fp32, est. <0.0001% differ from fp32 (95% bound <0.0001%)" in line
    assert main(["coverage", "--run-dir", str(run_dir), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {f["classifier"] for f in doc["fidelity"]} == {"topic", "topic_nourl", "format",
                                                           "format_nourl"}  # fmt: skip
    report = verify.verify_run(run_dir)
    assert any(ln.startswith("fidelity topic:") for ln in report.lines())
    # the re-check's share of engine time, summed over the files' stats
    assert cov.recheck_share == pytest.approx(0.2) and doc["recheck_share"] == 0.2
    assert doc["recheck_seconds"] == pytest.approx(0.2 * doc["engine_seconds"], abs=2e-3)
    assert "re-check 20.0% of engine time re-ran near ties in float32" in format_table(cov)


def test_missing_derived_outputs_are_said_to_be_rewritten_not_relabelled(tmp_path: Path):
    """The dry run's coverage names the cheap fix ``--repair`` really makes (#48)."""
    from dataclasses import replace as dc_replace

    from shardwise.ops.coverage import render as coverage_format

    run_dir, _files, _done = _small_run(tmp_path)
    base = coverage.compute(coverage.load_state(run_dir))
    derived = dc_replace(base, outputs_missing={"dolma": 3})
    (line,) = [ln for ln in coverage_format.summary_lines(derived) if ln.startswith("outputs")]
    assert "`--repair` writes their dolma outputs again from the sidecars (relabelling" in line
    assert "relabels" not in line.replace("relabelling", "")
    both = dc_replace(base, outputs_missing={"dolma": 3, "stats": 1})
    (line,) = [ln for ln in coverage_format.summary_lines(both) if ln.startswith("outputs")]
    assert line.endswith("and relabels the files without their stats")
