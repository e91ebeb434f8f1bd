"""Planning at parse time: run.json, the cached plan, refusals that touch nothing."""

import io
import json
import os
import shutil
import subprocess
import sys

import pytest
from e2e import tiny_model_dir

from shardwise.cli.main import main
from shardwise.demo.corpus import DemoSize, write_corpus
from shardwise.errors import ConfigError, InputError, ModelError, RunMismatchError
from shardwise.planner import prepare as planner
from shardwise.planner import runlock
from shardwise.run import drift, markers, outputs, plan, quarantine
from shardwise.run.sharding import check_shard_count, shard_for_task
from shardwise.snakefile import prepare_run
from shardwise.store.location import Location


@pytest.fixture
def corpus(tmp_path):
    write_corpus(tmp_path / "corpus", DemoSize(files_per_category=2, docs_per_file=3))
    return tmp_path / "corpus"


def config(tmp_path, corpus, **over):
    cfg = {
        "run_dir": str(tmp_path / "run"),
        "input": {"uri": str(corpus)},
        "output": {"uri": str(tmp_path / "labels")},
        "sharding": {"total_shards": 16},
        "classifiers": [{"name": "topic", "model": str(tiny_model_dir()), "input": "url_text"}],
    }
    for key, value in over.items():
        cfg[key] = value
    return cfg


def prepare(cfg, **kw):
    out = io.StringIO()
    kw.setdefault("dryrun", True)
    info = prepare_run(cfg, main_process=True, out=out, **kw)
    return info, out.getvalue()


def snapshot(path):
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != runlock.LOCK_FILE
    }


def test_first_parse_pins_run_json_caches_plan_marks_empty_shards(tmp_path, corpus):
    info, text = prepare(config(tmp_path, corpus))
    run_dir = tmp_path / "run"
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["total_shards"] == 16 and meta["task_count"] == 12
    assert (tmp_path / "labels" / "run.json").read_bytes() == (run_dir / "run.json").read_bytes()
    table = plan.load(run_dir)
    assert table.num_rows == 12
    empty = plan.empty_shards(table, 16, 0)
    assert empty, "12 tasks in 16 shards leave some shards empty"
    assert markers.done_shards(run_dir) == set(empty)
    assert json.loads((run_dir / "settings.json").read_text())["input"]["id_field"] == "id"
    assert info.shards == tuple(range(16))
    assert "shards" in text and "cc/science" in text


def test_cached_plan_is_reused_without_listing_when_relist_is_off(tmp_path, corpus, monkeypatch):
    cfg = config(tmp_path, corpus)
    prepare(cfg)
    before = (tmp_path / "run" / "plan.parquet").stat().st_mtime_ns

    real = planner.Location.list_entries

    def no_listing(self):
        if self.uri == str(corpus):
            raise AssertionError("the input was listed again")
        return real(self)

    monkeypatch.setattr(planner.Location, "list_entries", no_listing)
    cfg["input"]["relist"] = False
    prepare(cfg, report=False)
    assert (tmp_path / "run" / "plan.parquet").stat().st_mtime_ns == before


def test_cluster_job_parse_reads_run_json_only(tmp_path, corpus, monkeypatch):
    cfg = config(tmp_path, corpus)
    prepare(cfg)
    monkeypatch.setattr(planner, "_plan_table", lambda s: pytest.fail("planned in a job"))
    out = io.StringIO()
    info = prepare_run(cfg, main_process=False, out=out)
    assert info.shards == tuple(range(16)) and out.getvalue() == ""


def test_changed_total_shards_is_refused_and_touches_nothing(tmp_path, corpus):
    prepare(config(tmp_path, corpus))
    before = snapshot(tmp_path)
    with pytest.raises(RunMismatchError, match=r"total_shards: 16 -> 17"):
        prepare(config(tmp_path, corpus, sharding={"total_shards": 17}))
    assert snapshot(tmp_path) == before


def test_changed_input_set_is_refused_with_counts(tmp_path, corpus):
    prepare(config(tmp_path, corpus))
    (corpus / "cc" / "science" / "part-0000.parquet").unlink()
    (corpus / "new" / "cat").mkdir(parents=True)
    for i in range(3):
        (corpus / "new" / "cat" / f"p{i}.jsonl").write_text('{"id": "x", "text": "y"}\n')
    before = snapshot(tmp_path / "run")
    with pytest.raises(RunMismatchError, match=r"3 task\(s\) added, 1 removed") as info:
        prepare(config(tmp_path, corpus))
    # the refusal names the files and the one command that takes them in
    assert (
        "3 file(s) added ('new/cat/p0.jsonl', 'new/cat/p1.jsonl', 'new/cat/p2.jsonl'), 1 planned "
        "file(s) gone ('cc/science/part-0000.parquet')" in str(info.value)
    )
    assert "`shardwise plan --extend --gone keep|remove --configfile <this config>`" in str(
        info.value
    )
    after = snapshot(tmp_path / "run")
    found = drift.load(tmp_path / "run")  # what coverage and verify say until then
    assert (found.added, found.gone) == (3, 1)
    assert {k: v for k, v in after.items() if k != drift.DRIFT_JSON} == before  # nothing else


def test_output_run_json_from_another_cluster_is_checked_first(tmp_path, corpus):
    prepare(config(tmp_path, corpus, run_dir=str(tmp_path / "run-a")))
    with pytest.raises(RunMismatchError, match="labels/run.json pins a different run"):
        prepare(
            config(tmp_path, corpus, run_dir=str(tmp_path / "run-b"), sharding={"total_shards": 5})
        )
    assert not (tmp_path / "run-b" / "run.json").exists()


def test_shards_finished_elsewhere_are_marked_from_one_listing(tmp_path, corpus, monkeypatch):
    cfg = config(tmp_path, corpus)
    prepare(cfg)
    table = plan.load(tmp_path / "run")
    shard = table["shard"][0].as_py()
    out = Location(str(tmp_path / "labels"))
    for rel in plan.files_of_shard(table, shard)["file"].to_pylist():
        out.write_bytes(
            outputs.MARKER.rel(rel), markers.FileMarker.now(rel, rel, shard, 3, None).to_json()
        )
    calls = []
    real = planner.Location.list_entries
    monkeypatch.setattr(
        planner.Location, "list_entries", lambda self: calls.append(self.uri) or real(self)
    )
    prepare(cfg, report=False)
    assert shard in markers.done_shards(tmp_path / "run")
    assert (
        json.loads(markers.shard_marker_path(tmp_path / "run", shard).read_text())["source"]
        == "remote"
    )
    assert calls.count(str(tmp_path / "labels")) == 1


def test_second_top_level_process_on_same_run_dir_is_refused(tmp_path, corpus):
    cfg = config(tmp_path, corpus)
    prepare(cfg, dryrun=False)  # holds the lock for this (test) process
    pid = os.fork()
    if pid == 0:  # child: a second top-level process
        try:
            runlock.lock_run_dir(tmp_path / "run")
        except RunMismatchError:
            os._exit(7)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7


# -- issue 10: operator mistakes ---------------------------------------------------


def test_a_model_path_typo_is_refused_at_the_dry_run_and_nothing_is_pinned(tmp_path, corpus):
    typo = str(tiny_model_dir().parent / "topc")
    cfg = config(tmp_path, corpus)
    cfg["classifiers"] = [{"name": "topic", "model": typo, "input": "url_text"}]
    with pytest.raises(ModelError, match=r"classifier 'topic' \(model '.*/topc'\): no such dir"):
        prepare(cfg)
    assert not (tmp_path / "run" / "run.json").exists()
    assert not (tmp_path / "labels").exists()


def with_model(cfg, name):
    cfg["classifiers"] = [{"name": "topic", "model": str(tiny_model_dir(name)), "input": "text"}]
    return cfg


def test_repin_replaces_both_copies_while_nothing_is_labelled(tmp_path, corpus):
    prepare(with_model(config(tmp_path, corpus), "topic"))
    fixed = with_model(config(tmp_path, corpus, sharding={"total_shards": 5}), "format")
    with pytest.raises(RunMismatchError) as info:
        prepare(fixed)
    assert "Nothing of this run is labelled yet" in str(info.value)
    assert "shardwise plan --repin" in str(info.value)
    _, text = prepare(fixed, repin=True)
    assert f"re-pinning {tmp_path / 'run'}/run.json (nothing is labelled yet):" in text
    assert "  total_shards: 16 -> 5" in text and "/format'" in text
    for copy in (tmp_path / "run" / "run.json", tmp_path / "labels" / "run.json"):
        meta = json.loads(copy.read_text())
        assert meta["total_shards"] == 5 and meta["classifiers"][0]["model"].endswith("format")
    assert plan.load(tmp_path / "run")["shard"].to_pylist() == [
        shard_for_task(t, 5) for t in plan.load(tmp_path / "run")["task_id"].to_pylist()
    ]
    assert max(markers.done_shards(tmp_path / "run")) < 5  # old shard markers are gone
    prepare(fixed)  # and the re-pinned run is accepted as it is


def test_repin_works_with_the_run_directory_deleted(tmp_path, corpus):
    prepare(with_model(config(tmp_path, corpus), "topic"))
    shutil.rmtree(tmp_path / "run")
    fixed = with_model(config(tmp_path, corpus), "format")
    with pytest.raises(RunMismatchError, match="labels/run.json pins a different run"):
        prepare(fixed)
    prepare(fixed, repin=True)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["classifiers"][0][
        "model"
    ].endswith("format")


def test_repin_is_refused_once_one_file_is_labelled(tmp_path, corpus):
    prepare(with_model(config(tmp_path, corpus), "topic"))
    rel = plan.load(tmp_path / "run")["file"][0].as_py()
    Location(str(tmp_path / "labels")).write_bytes(
        outputs.MARKER.rel(rel), markers.FileMarker.now(rel, rel, 0, 3, None).to_json()
    )
    fixed = with_model(config(tmp_path, corpus), "format")
    with pytest.raises(RunMismatchError, match="1 file\\(s\\) of this run are already labelled"):
        prepare(fixed)
    before = snapshot(tmp_path)
    with pytest.raises(RunMismatchError, match="cannot re-pin: 1 file\\(s\\) of this run are"):
        prepare(fixed, repin=True)
    assert snapshot(tmp_path) == before


def test_a_removed_file_is_refused_with_a_pointer_to_quarantine(tmp_path, corpus):
    prepare(config(tmp_path, corpus))
    (corpus / "cc" / "science" / "part-0000.parquet").unlink()
    with pytest.raises(RunMismatchError) as info:
        prepare(config(tmp_path, corpus))
    assert "0 task(s) added, 1 removed" in str(info.value)
    assert f"shardwise quarantine --run-dir {tmp_path / 'run'} FILE" in str(info.value)


def test_a_quarantined_file_may_leave_the_input_without_changing_the_plan(tmp_path, corpus):
    prepare(config(tmp_path, corpus))
    plan_before = (tmp_path / "run" / "plan.parquet").read_bytes()
    quarantine.add(tmp_path / "run", ["cc/science/part-0000.parquet"], "truncated upload")
    (corpus / "cc" / "science" / "part-0000.parquet").unlink()
    _, text = prepare(config(tmp_path, corpus))
    assert "note: 1 quarantined file(s) are no longer in the input" in text
    assert (tmp_path / "run" / "plan.parquet").read_bytes() == plan_before
    (corpus / "cc" / "science" / "part-0001.jsonl.gz").unlink()  # not quarantined
    with pytest.raises(RunMismatchError, match="0 task\\(s\\) added, 2 removed"):
        prepare(config(tmp_path, corpus))


def test_the_dry_run_says_what_the_listing_held_that_is_not_input(tmp_path, corpus):
    (corpus / "cc" / "_SUCCESS").write_text("")
    labels = corpus / "labels"  # output root inside the input root
    (labels / "cc").mkdir(parents=True)
    (labels / "cc" / "x.jsonl.labels.parquet").write_bytes(b"PAR1")
    (corpus / "cc" / "science" / "own.labels.parquet").write_bytes(
        (corpus / "cc" / "science" / "part-0000.parquet").read_bytes()
    )
    _, text = prepare(config(tmp_path, corpus, output={"uri": str(labels)}))
    assert (
        "note: skipped 1 hidden file(s) (names starting with '.' or '_', e.g. 'cc/_SUCCESS')"
        in text
    )
    assert "note: skipped 1 shardwise output(s) under the output root" in text
    assert "cc/science/own.labels.parquet" in plan.load(tmp_path / "run")["file"].to_pylist()


def test_unsafe_names_refuse_planning_unless_skipped_explicitly(tmp_path, corpus):
    (corpus / "cc" / "sci\\ence.jsonl").write_text('{"id": "x", "text": "y"}\n')
    with pytest.raises(InputError, match=r"'cc/sci\\\\ence.jsonl': a backslash"):
        prepare(config(tmp_path, corpus))
    cfg = config(tmp_path, corpus)
    cfg["input"]["skip_unsafe_names"] = True
    _, text = prepare(cfg)
    assert "note: skipped 1 file(s) whose names cannot be used safely" in text
    assert "cc/sci\\ence.jsonl" not in plan.load(tmp_path / "run")["file"].to_pylist()


def test_a_missing_input_folder_says_it_does_not_exist(tmp_path):
    with pytest.raises(InputError, match=r"the folder .*/nowhere does not exist"):
        prepare(config(tmp_path, tmp_path / "nowhere"))


# -- a damaged or disagreeing run.json has a way forward ------------------------------


def test_a_truncated_copy_names_the_intact_one_and_verify_repair_restores_it(tmp_path, corpus):
    cfg = config(tmp_path, corpus)
    prepare(cfg)
    run_dir, labels = tmp_path / "run", tmp_path / "labels"
    good = (run_dir / "run.json").read_bytes()
    for damaged, intact in ((run_dir, labels), (labels, run_dir)):
        (damaged / "run.json").write_bytes(good[: len(good) // 2])  # a truncated copy
        with pytest.raises(RunMismatchError) as info:
            prepare(cfg)
        message = str(info.value)
        assert message.startswith(f"{damaged}/run.json is damaged: not a valid shardwise run.json")
        assert f"The copy at {intact}/run.json is intact" in message
        assert f"`shardwise verify --run-dir {run_dir} --repair`" in message
        assert main(["verify", "--run-dir", str(run_dir), "--repair"]) == 0
        assert (damaged / "run.json").read_bytes() == good
        prepare(cfg)


def test_a_view_of_a_damaged_run_dir_copy_names_the_restore_command(tmp_path, corpus, capsys):
    prepare(config(tmp_path, corpus))
    (tmp_path / "run" / "run.json").write_text("{")
    assert main(["coverage", "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "is damaged" in err and "--repair` restores it from the output root's copy" in err


def test_both_copies_damaged_says_what_is_left_to_do(tmp_path, corpus):
    cfg = config(tmp_path, corpus)
    prepare(cfg)
    for root in (tmp_path / "run", tmp_path / "labels"):
        (root / "run.json").write_text("{")
    with pytest.raises(RunMismatchError, match="No intact copy is left: if nothing of the run"):
        prepare(cfg)


def test_copies_that_disagree_say_so_and_not_that_the_config_changed(tmp_path, corpus):
    cfg = config(tmp_path, corpus)
    prepare(cfg)
    run_dir = tmp_path / "run"
    repinned = {**cfg, "sharding": {"total_shards": 8}}
    # an interrupted re-pin: the run directory's copy is new, the output root's still old
    new_meta = json.loads((run_dir / "run.json").read_text())
    new_meta["total_shards"] = 8
    (run_dir / "run.json").write_text(json.dumps(new_meta))
    with pytest.raises(RunMismatchError) as info:
        prepare(repinned)
    message = str(info.value)
    assert message.startswith("the two run.json copies disagree (run directory -> output root")
    assert "  total_shards: 8 -> 16" in message
    assert "restore the original settings" not in message
    assert "run it again to finish it" in message
    prepare(repinned, repin=True)  # finishing the re-pin (nothing labelled) makes them one
    assert json.loads((tmp_path / "labels" / "run.json").read_text())["total_shards"] == 8
    # or: verify --repair takes the output root's copy
    (run_dir / "run.json").write_text(json.dumps({**new_meta, "total_shards": 4}))
    assert main(["verify", "--run-dir", str(run_dir), "--repair"]) in (0, 1)
    assert json.loads((run_dir / "run.json").read_text())["total_shards"] == 8


def test_listed_files_that_are_no_input_are_named_on_the_dry_run_and_in_coverage(
    tmp_path, corpus, capsys
):
    from shardwise.ops.coverage import compute as coverage
    from shardwise.ops.coverage.render import format_table

    for name in ("cc/science/notes.txt", "cc/science/part-9.json.bz2", "wiki/x.csv"):
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_text("x")
    _info, printed = prepare(config(tmp_path, corpus))
    (note,) = [m for m in printed.splitlines() if "neither inputs nor shardwise outputs" in m]
    assert "3 listed file(s)" in note and "'cc/science/notes.txt'" in note
    assert "narrow input.glob" in note and note.count("label them") == 1  # said once
    cov = coverage.compute(coverage.load_state(tmp_path / "run"))
    assert cov.skipped.count == 3
    assert "skipped  3 listed file(s)" in format_table(cov)
    (corpus / "wiki/x.csv").unlink()
    prepare(config(tmp_path, corpus, input={"uri": str(corpus), "glob": "**/*.parquet"}),
            repin=True)  # fmt: skip
    assert coverage.compute(coverage.load_state(tmp_path / "run")).skipped.count == 0


@pytest.mark.parametrize(
    ("total", "fix"),
    [
        (1_000_000, r"at least 999,988 of them would be empty; .* at most 1,000 \(e\.g\. 12 for"),
        (5_000, r"at least 4,988 of them would be empty"),
    ],
)
def test_far_more_shards_than_tasks_is_refused_before_anything_is_pinned(
    tmp_path, corpus, total, fix
):
    """1,000,000 shards on 4 files once ran minutes and wrote 33,646 empty-shard markers."""
    cfg = config(tmp_path, corpus, sharding={"total_shards": total})
    with pytest.raises(ConfigError, match=rf"sharding.total_shards: {total:,} for 12 task"):
        prepare(cfg)
    with pytest.raises(ConfigError, match=fix + r".*nothing was pinned"):
        prepare(cfg)
    assert not (tmp_path / "run" / "run.json").exists()
    assert not (tmp_path / "labels").exists()
    assert not list((tmp_path / "run").rglob("*.done"))
    prepare(config(tmp_path, corpus, sharding={"total_shards": 120}))  # 10 per task: planned


def test_more_shards_than_snakemake_can_plan_is_refused():
    with pytest.raises(ConfigError, match=r"250,000 for 30,000 task\(s\): more than Snakemake"):
        check_shard_count(250_000, 30_000)
    check_shard_count(200_000, 30_000)


def test_a_dry_run_beside_a_live_run_says_so(tmp_path, corpus):
    """Snakemake prints 'Directory cannot be locked' under a dry run and exits 0."""
    cfg = config(tmp_path, corpus)
    prepare(cfg)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from shardwise.planner.runlock import lock_run_dir; "
         f"lock_run_dir(Path({str(tmp_path / 'run')!r})); print('locked', flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"  # the event: it holds the lock
        info, _ = prepare(cfg)
        (note,) = [m for m in info.messages if "a live run holds" in m]
        assert f"(pid {holder.pid} on {os.uname().nodename} since" in note
        assert "this dry run only reports, it changes nothing" in note
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    info, _ = prepare(cfg)
    assert not [m for m in info.messages if "a live run holds" in m]
