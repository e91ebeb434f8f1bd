"""Shard-job bookkeeping that needs no model: progress journal, failure records."""

import json
from pathlib import Path

import pytest
import torch
from inproc import TINY, demo_run_config, label, plan_run

from shardwise.cli.main import main
from shardwise.demo.corpus import write_corpus
from shardwise.errors import ShardFailedError
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage.render import fidelity_lines, quality_lines
from shardwise.ops.verify import check as verify
from shardwise.planner.prepare import prepare_run
from shardwise.run import failures, journal, markers, plan


def test_progress_journal_survives_a_torn_last_line(tmp_path):
    journal.append(tmp_path, 3, journal.Line("a.parquet", 10))
    journal.append(tmp_path, 3, journal.Line("b.parquet", 5))
    with (tmp_path / "progress" / "3.jsonl").open("a") as fh:
        fh.write('{"file": "c.parq')  # killed mid-append
    assert journal.rows_done(tmp_path, 3) == {"a.parquet": 10, "b.parquet": 5}
    assert journal.rows_done(tmp_path, 4) == {}


def test_output_markers_snapshot_roundtrip(tmp_path):
    markers.write_snapshot(tmp_path, {"b", "a"})
    assert (tmp_path / markers.OUTPUT_MARKERS).read_text() == "a\nb\n"


def test_forget_done_drops_files_from_the_journal_and_the_snapshot(tmp_path):
    journal.append(tmp_path, 3, journal.Line("a.parquet", 10))
    journal.append(tmp_path, 3, journal.Line("b.parquet", 5))
    markers.write_snapshot(tmp_path, {"a.parquet", "b.parquet", "c.parquet"})
    journal.forget(tmp_path, 3, {"a.parquet"})
    markers.forget_in_snapshot(tmp_path, {"a.parquet"})
    assert journal.rows_done(tmp_path, 3) == {"b.parquet": 5}
    assert (tmp_path / markers.OUTPUT_MARKERS).read_text() == "b.parquet\nc.parquet\n"


# -- issue 10: a field name that no row has is a failed file, never empty labels ------


def test_a_text_field_typo_fails_each_file_by_name_and_the_fix_relabels(tmp_path):
    cfg = plan_run(tmp_path, total_shards=1)
    # no sample at planning (it would refuse the typo: planner/test_fieldcheck.py): the job's
    # own check, as for files that differ from the sample
    cfg["input"] = {**cfg["input"], "text_field": "body", "sample_files": 0}
    prepare_run(cfg, main_process=True, dryrun=True, repin=True)  # nothing labelled yet
    with pytest.raises(ShardFailedError) as info:
        label(tmp_path / "run")
    message = str(info.value)
    files = plan.load(tmp_path / "run")["file"].to_pylist()
    assert f"shard 0: {len(files)} of {len(files)} file(s) tried failed" in message
    assert message.count("input.text_field 'body' is in none of its") == len(files)
    assert "fields found: id, text, url" in message
    assert not list((tmp_path / "labels").rglob("*.done"))  # nothing vouches for empty text
    record = failures.latest(tmp_path / "run", 0)
    assert (record.kind, record.shared) == ("config", True)  # every file: the run stops early
    assert record.reason.startswith("input.text_field 'body' is in no row of any file;")
    cfg["input"]["text_field"] = "text"  # the fix: pinned, but re-pinned while nothing is labelled
    prepare_run(cfg, main_process=True, dryrun=True, repin=True)
    label(tmp_path / "run")
    assert len(list((tmp_path / "labels").rglob("*.done"))) == len(files)


def test_missing_texts_are_counted_per_file_and_totalled_by_coverage(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rows = [{"id": str(i), "url": "u", **({"text": "t"} if i % 10 >= 3 else {})} for i in range(20)]
    (corpus / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (corpus / "b.jsonl").write_text('{"id": "x", "text": 5, "url": "u"}\n')
    cfg = demo_run_config(tmp_path, 1)
    cfg["input"] = {"uri": str(corpus)}
    prepare_run(cfg, main_process=True, dryrun=True)
    label(tmp_path / "run")
    stats = json.loads((tmp_path / "labels" / "a.jsonl.stats.json").read_text())
    assert stats["counts"] == {"missing_text": 6}
    cov = coverage.compute(coverage.load_state(tmp_path / "run"))
    assert cov.data_quality == {"missing_text": 6, "non_string_texts": 1}
    [line] = quality_lines(cov.data_quality, cov.docs_done)
    assert line == (
        "data     6 without text (28.6%): 6 missing the field, 0 null; "
        "1 non-string texts read as strings  ! check input.text_field"
    )
    result = verify.verify_run(tmp_path / "run")
    assert result.data_quality == {"missing_text": 6, "non_string_texts": 1}


def test_half_precision_with_device_auto_on_a_cpu_is_said_at_the_dry_run_the_job_and_coverage(
    tmp_path, capsys
):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here: device auto would label on it")
    write_corpus(tmp_path / "corpus", TINY)
    cfg = demo_run_config(tmp_path, 1)  # the tiny real models, through the real engine
    cfg["inference"].update({"dtype": "float16", "device": "auto", "max_length": 64})
    info = prepare_run(cfg, main_process=True, dryrun=True)
    said = [m for m in info.messages if "inference.dtype float16 with inference.device auto" in m]
    assert len(said) == 1 and "no GPU is visible here" in said[0], info.messages
    run_dir = cfg["run_dir"]
    assert main(["classify-shard", "--run-dir", run_dir, "--shard", "0", "--no-progress"]) == 0
    out = capsys.readouterr().out  # the job's stdout: the console (its stderr is the log)
    assert out.count("shardwise: shard 0 ran inference.dtype float16 on a CPU") == 1, out
    lines = fidelity_lines(coverage.compute(coverage.load_state(Path(run_dir))).fidelity)
    files = len(plan.load(Path(run_dir)))
    assert len(lines) == 4 and all(
        f"! {files} file(s) in half precision on a CPU" in ln for ln in lines
    )
    cfg["inference"]["dtype"] = "auto"
    assert not [
        m for m in prepare_run(cfg, main_process=True, dryrun=True).messages if "no GPU" in m
    ]
