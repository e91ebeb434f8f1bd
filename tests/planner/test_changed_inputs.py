"""An input file changed in place after it was labelled is named, never relabelled silently.

The same ids and row count with new text: the labels describe content that no longer
exists. The dry run, coverage and verify name the file; ``verify --repair`` relabels it,
``verify --accept-changed`` keeps its labels on purpose. On local disk (size and mtime)
and on the moto S3 server (the ETag).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from inproc import label, plan_run, s3_run_config

from shardwise.cli.main import main
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage.render import format_table
from shardwise.ops.verify import check as verify
from shardwise.run import plan as run_plan
from shardwise.snakefile import prepare_run


def new_text(data: bytes) -> bytes:
    """The same Parquet file (ids, rows) with every text replaced."""
    table = pq.read_table(pa.BufferReader(data))
    texts = pa.array([f"rewritten document {i}" for i in range(table.num_rows)], pa.string())
    table = table.set_column(table.column_names.index("text"), "text", texts)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def dry_run(cfg: dict) -> str:
    out = io.StringIO()
    prepare_run(cfg, main_process=True, dryrun=True, out=out)
    return out.getvalue()


def a_parquet_file(run_dir: Path) -> str:
    """One planned Parquet file of the run (relative path)."""
    return next(f for f in run_plan.load(run_dir)["file"].to_pylist() if f.endswith(".parquet"))


def labelled_then_rewritten(tmp_path: Path) -> tuple[dict, Path, str]:
    """A labelled local run, then one Parquet input rewritten in place (new text, same ids
    and rows); (config, run dir, that file)."""
    cfg = plan_run(tmp_path, total_shards=3)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    rel = a_parquet_file(run_dir)
    path = tmp_path / "corpus" / rel
    path.write_bytes(new_text(path.read_bytes()))
    os.utime(path, ns=(1, 1))  # whatever the clock's resolution: another mtime
    return cfg, run_dir, rel


def test_a_local_file_rewritten_in_place_is_named_and_relabelled_on_repair(tmp_path, capsys):
    cfg, run_dir, rel = labelled_then_rewritten(tmp_path)

    assert f"changed  1 labelled input file(s) changed in place since they were labelled" \
        f" (size:version): {rel}" in dry_run(cfg)  # fmt: skip
    assert f": {rel} (" in format_table(coverage.compute(coverage.load_state(run_dir)))
    report = verify.verify_run(run_dir)
    assert not report.ok and rel in report.broken_files
    assert any("changed in place since it was labelled" in p.what for p in report.problems)

    assert main(["verify", "--run-dir", str(run_dir), "--repair"]) == 0
    assert f"(relabel {rel})" in capsys.readouterr().out
    label(run_dir)
    assert "changed in place" not in dry_run(cfg)
    assert verify.verify_run(run_dir, complete=True).ok


def test_keeping_the_labels_of_a_changed_file_is_a_choice_said_once(tmp_path, capsys):
    cfg, run_dir, rel = labelled_then_rewritten(tmp_path)
    assert main(["verify", "--run-dir", str(run_dir), "--accept-changed"]) == 0
    assert f"accepted {rel}: its labels stay" in capsys.readouterr().out
    assert "changed in place" not in dry_run(cfg)


def test_an_s3_object_rewritten_in_place_is_named_by_the_dry_run_coverage_and_verify(tmp_path, s3):
    cfg, corpus = s3_run_config(tmp_path, s3)
    dry_run(cfg)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    rel = a_parquet_file(run_dir)
    corpus.write_bytes(rel, new_text(corpus.read_bytes(rel)))

    assert f"changed in place since they were labelled (size:version): {rel}" in dry_run(cfg)
    assert f": {rel} (" in format_table(coverage.compute(coverage.load_state(run_dir)))
    report = verify.verify_run(run_dir)
    assert rel in report.broken_files and report.changed.keys() == {rel}
