"""``shardwise verify``: every check fires on the fault it exists for, and only then.

Runs are built in-process (``prepare_run`` + ``run_shard`` with a fake engine) so
each test costs milliseconds; the fault matrix (tests/test_faults.py) runs verify on
real runs.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from inproc import TINY, demo_run_config, label, plan_run, s3_run_config

from shardwise.cli.main import main
from shardwise.demo.corpus import write_corpus
from shardwise.ops.coverage.render import format_table
from shardwise.ops.verify import check as verify
from shardwise.planner.prepare import prepare_run
from shardwise.run import markers, outputs, plan


@pytest.fixture
def run(tmp_path: Path) -> SimpleNamespace:
    """A complete in-process run: run dir, output dir, a labelled file and its shard."""
    plan_run(tmp_path)
    run_dir = tmp_path / "run"
    label(run_dir)
    table = plan.load(run_dir).to_pydict()
    rel = table["file"][0]
    return SimpleNamespace(
        run_dir=run_dir,
        labels=tmp_path / "labels",
        corpus=tmp_path / "corpus",
        rel=rel,
        shard=table["shard"][0],
        files=table["file"],
    )


def check(run_dir: Path, **kw) -> verify.VerifyReport:
    return verify.verify_run(run_dir, **kw)


def whats(report: verify.VerifyReport) -> list[str]:
    return [f"{f.where}: {f.what}" for f in report.problems]


def rewrite_sidecar(path: Path, fn) -> None:
    table = pq.read_table(path)
    buf = io.BytesIO()
    pq.write_table(fn(table), buf)
    path.write_bytes(buf.getvalue())


# -- a consistent run ------------------------------------------------------------


def test_complete_run_is_consistent(run, capsys):
    report = check(run.run_dir, complete=True)
    assert report.ok, report.lines()
    assert not report.warnings
    assert report.files_marked == report.files_planned == report.files_checked == 6
    assert report.rows_checked == 6 * TINY.docs_per_file
    assert report.shards_done == report.shards_total == 3
    assert main(["verify", "--run-dir", str(run.run_dir), "--complete"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    fidelity = [f"fidelity {n}: " for n in ("topic", "topic_nourl", "format", "format_nourl")]
    assert [line[: len(f)] for line, f in zip(out, fidelity, strict=False)] == fidelity
    assert out[4:] == [report.summary()]
    assert out[4].startswith("verify OK: 0 problem(s)")


def test_json_format(run, capsys):
    assert main(["verify", "--run-dir", str(run.run_dir), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["files_checked"] == 6 and data["problems"] == []


def test_unfinished_run_is_consistent_but_not_complete(tmp_path, capsys):
    cfg = plan_run(tmp_path)
    run_dir = Path(cfg["run_dir"])
    busy = sorted(plan.nonempty_shards(plan.load(run_dir)))
    label(run_dir, busy[:1])
    report = check(run_dir)
    assert report.ok, report.lines()
    assert report.shards_done < report.shards_total
    assert main(["verify", "--run-dir", str(run_dir), "--complete"]) == 1
    out = capsys.readouterr().out
    assert f"shard {busy[-1]} is not done" in out
    assert "verify FAILED" in out.strip().splitlines()[-1]


def test_not_a_run_dir_exits_2(tmp_path, capsys):
    assert main(["verify", "--run-dir", str(tmp_path)]) == 2
    assert "cannot verify" in capsys.readouterr().err


@pytest.mark.parametrize("fraction", [0.0, 1.5, -1.0])
def test_sample_must_be_a_fraction(run, fraction):
    assert main(["verify", "--run-dir", str(run.run_dir), "--sample", str(fraction)]) == 2


# -- each fault is found, named, and fails the exit status -----------------------


def _drop_row(table: pa.Table) -> pa.Table:
    return table.slice(0, table.num_rows - 1)


def _swap_ids(table: pa.Table) -> pa.Table:
    ids = table["id"].to_pylist()
    ids[0], ids[1] = ids[1], ids[0]
    return table.set_column(0, "id", pa.array(ids, pa.string()))


def _drop_column(table: pa.Table) -> pa.Table:
    return table.drop_columns(["format_score"])


def _null_label(table: pa.Table) -> pa.Table:
    i = table.column_names.index("topic_label")
    values = table["topic_label"].to_pylist()
    values[2] = None
    return table.set_column(i, "topic_label", pa.array(values, pa.string()))


def _nan_score(table: pa.Table) -> pa.Table:
    i = table.column_names.index("topic_score")
    values = table["topic_score"].to_pylist()
    values[0] = float("nan")
    return table.set_column(i, "topic_score", pa.array(values, pa.float32()))


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_drop_row, "has 4 rows, the input has 5"),
        (_swap_ids, "ids differ from the input's at 2 row(s); first at row 0"),
        (_drop_column, "no format_score column"),
        (_null_label, "topic_label has 1 null(s)"),
        (_nan_score, "topic_score has 1 NaN(s)"),
    ],
)
def test_bad_sidecar_content(run, mutate, expected, capsys):
    path = run.labels / outputs.SIDECAR.rel(run.rel)
    rewrite_sidecar(path, mutate)
    report = check(run.run_dir)
    found = whats(report)
    assert len(found) == 1 and found[0].startswith(f"{path}: {expected}"), found
    assert main(["verify", "--run-dir", str(run.run_dir)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    lines = [line for line in lines if not line.startswith("fidelity ")]  # per classifier
    assert lines == [
        f"problem: {found[0]}",
        report.summary(),
        f"fix: `shardwise verify --run-dir {run.run_dir} --repair` removes the markers of "
        "1 broken file(s) and of the 1 shard(s) that hold them, so the next snakemake run "
        "relabels only those files",
    ]


def test_missing_sidecar_and_stats(run):
    kinds = [k for k in outputs.vouched() if k.root == "output"]  # every one the marker vouches
    for kind in kinds:
        (run.labels / kind.rel(run.rel)).unlink()
    marker = run.labels / outputs.MARKER.rel(run.rel)
    assert whats(check(run.run_dir)) == [f"{marker}: marker without its {k.name}" for k in kinds]


def test_garbage_sidecar_and_stats(run):
    (run.labels / outputs.SIDECAR.rel(run.rel)).write_bytes(b"not parquet")
    (run.labels / outputs.STATS.rel(run.rel)).write_text("{half")
    found = whats(check(run.run_dir))
    assert len(found) == 2
    assert "unreadable stats" in found[0] and "not valid JSON" in found[0]
    assert "unreadable sidecar" in found[1]


def test_marker_rows_must_match_the_input(run):
    path = run.labels / outputs.MARKER.rel(run.rel)
    data = json.loads(path.read_text())
    data["rows"] = 6
    path.write_text(json.dumps(data))
    found = whats(check(run.run_dir))
    assert found[0] == f"{path}: says 6 rows, the input has 5"
    shard_marker = markers.shard_marker_path(run.run_dir, run.shard)
    docs = 5 * plan.files_of_shard(plan.load(run.run_dir), run.shard).num_rows
    assert found[1:] == [
        f"{shard_marker}: says {docs} docs, its files' markers add up to {docs + 1}"
    ]


def test_marker_for_another_shard(run):
    path = run.labels / outputs.MARKER.rel(run.rel)
    data = json.loads(path.read_text())
    data["shard"] = run.shard + 1
    path.write_text(json.dumps(data))
    assert whats(check(run.run_dir)) == [
        f"{path}: shard is {run.shard + 1}, the plan says {run.shard}"
    ]


def test_input_changed_after_labelling(run):
    path = run.corpus / run.rel
    assert path.name.endswith(".parquet")
    table = pq.read_table(path)
    pq.write_table(pa.concat_tables([table, table.slice(0, 1)]), path)
    found = whats(check(run.run_dir))
    assert any("has 5 rows, the input has 6" in w for w in found)
    assert any("says 5 rows, the input has 6" in w for w in found)


def test_input_removed_after_labelling(run):
    (run.corpus / run.rel).unlink()
    report = check(run.run_dir)
    found = whats(report)
    assert len(found) == 2
    # no relabel can mend it (verify once advised --repair "to relabel" a file that is gone)
    gone = next(w for w in found if "input file gone" in w)
    assert "input file gone, its labels kept: --repair cannot relabel it" in gone
    assert "`shardwise plan --extend --gone keep|remove`" in gone
    assert any(f"1 planned file(s) gone ('{run.rel}')" in w for w in found)  # the input set
    assert report.inputs_gone == [run.rel] and not report.broken_files
    assert report.input_drift["gone_files"] == [run.rel]


def test_done_shard_with_a_file_marker_missing(run):
    (run.labels / outputs.MARKER.rel(run.rel)).unlink()
    found = whats(check(run.run_dir))
    marker = run.labels / outputs.MARKER.rel(run.rel)
    assert f"{marker}: missing, but shard {run.shard} is marked done" in found
    assert any("no marker, yet its shard is marked done" in w for w in found)


def test_shard_marker_from_another_assignment(run):
    path = markers.shard_marker_path(run.run_dir, run.shard)
    data = json.loads(path.read_text())
    data["total_shards"] = 7
    path.write_text(json.dumps(data))
    assert whats(check(run.run_dir)) == [f"{path}: total_shards is 7, run.json says 3"]


def test_shard_marker_outside_the_run(run):
    markers.write_shard_marker(
        run.run_dir,
        markers.ShardMarker(
            shard=9, total_shards=3, minimum_shard_index=0, tasks=0, files=0, docs=0
        ),
    )
    path = markers.shard_marker_path(run.run_dir, 9)
    assert whats(check(run.run_dir)) == [f"{path}: marks shard 9, outside this run's shards 0..2"]


def test_shard_marker_docs_must_add_up(run):
    path = markers.shard_marker_path(run.run_dir, run.shard)
    data = json.loads(path.read_text())
    data["docs"] += 1
    path.write_text(json.dumps(data))
    found = whats(check(run.run_dir))
    assert len(found) == 1 and "docs, its files' markers add up to" in found[0]


def test_mirror_run_json_must_pin_the_same_run(run):
    path = run.labels / "run.json"
    data = json.loads(path.read_text())
    data["total_shards"] = 4
    path.write_text(json.dumps(data))
    assert whats(check(run.run_dir)) == [f"{path}: pins total_shards=4, the run directory 3"]


# -- orphans ------------------------------------------------------------------


def test_orphans_are_listed(run):
    (run.labels / "stray.txt").write_text("x")
    (run.labels / "cc" / "gone.jsonl.labels.parquet").write_bytes(b"x")
    (run.labels / "cc" / "gone.jsonl.done").write_text("{}")
    report = check(run.run_dir)
    assert sorted(whats(report)) == [
        f"{run.labels / 'cc' / 'gone.jsonl.done'}: orphan marker: "
        "'cc/gone.jsonl' is not a file of this run",
        f"{run.labels / 'cc' / 'gone.jsonl.labels.parquet'}: orphan sidecar: "
        "'cc/gone.jsonl' is not a file of this run",
        f"{run.labels / 'stray.txt'}: orphan: not an output of any file of this run",
    ]
    assert report.orphans == 3


def test_partial_outputs_of_an_unfinished_file_are_warnings(tmp_path):
    cfg = plan_run(tmp_path)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    table = plan.load(run_dir).to_pydict()
    rel, shard = table["file"][0], table["shard"][0]
    # The state a kill between the sidecar and the marker leaves: no marker, shard open.
    (tmp_path / "labels" / outputs.MARKER.rel(rel)).unlink()
    markers.shard_marker_path(run_dir, shard).unlink()
    temp = tmp_path / "labels" / f".{rel.rsplit('/', 1)[-1]}.done.tmp-123-abcdef01"
    temp.parent.mkdir(parents=True, exist_ok=True)
    temp.write_text("{")
    report = check(run_dir)
    assert report.ok, report.lines()
    got = sorted(f.what for f in report.warnings)
    partial = [f"{k.name} without a marker (unfinished; rewritten on retry)"
               for k in outputs.vouched() if k.root == "output"]  # fmt: skip
    assert got == sorted([*partial, "temp file of an interrupted write (safe to delete)"])
    assert not check(run_dir, complete=True).ok
    # The retry finishes the file; verify is then clean apart from the stray temp file.
    label(run_dir, [shard])
    report = check(run_dir, complete=True)
    assert report.ok and [f.what for f in report.warnings] == [got[-1]]


def test_input_sharing_the_output_root_is_not_an_orphan(tmp_path):
    write_corpus(tmp_path / "data", TINY)
    cfg = demo_run_config(tmp_path, 2)
    cfg["input"]["uri"] = cfg["output"]["uri"] = str(tmp_path / "data")
    prepare_run(cfg, main_process=True, dryrun=True)
    label(tmp_path / "run")
    (tmp_path / "data" / "README").write_text("the corpus's own file")
    report = check(tmp_path / "run", complete=True)
    assert report.ok and not report.warnings, report.lines()


def test_corpus_nested_under_the_output_prefix(tmp_path):
    write_corpus(tmp_path / "out" / "corpus", TINY)
    cfg = demo_run_config(tmp_path, 2)
    cfg["input"]["uri"] = str(tmp_path / "out" / "corpus")
    cfg["output"]["uri"] = str(tmp_path / "out")
    prepare_run(cfg, main_process=True, dryrun=True)
    label(tmp_path / "run")
    report = check(tmp_path / "run", complete=True)
    assert report.ok and not report.warnings, report.lines()


# -- sampling -----------------------------------------------------------------


def test_sample_reads_a_fraction_but_checks_presence_everywhere(run):
    report = check(run.run_dir, sample=0.34, seed=1)
    assert report.ok
    assert report.files_checked == math.ceil(0.34 * 6) == 3
    assert "(sample 0.34)" in report.summary()
    assert check(run.run_dir, sample=0.34, seed=1).files_checked == 3
    (run.labels / outputs.SIDECAR.rel(run.files[-1])).unlink()
    found = {f.what for f in check(run.run_dir, sample=0.01, seed=2).problems}
    assert found == {"marker without its sidecar"}


def test_sample_finds_content_faults_in_the_files_it_reads(run):
    for rel in run.files:
        rewrite_sidecar(run.labels / outputs.SIDECAR.rel(rel), _drop_row)
    report = check(run.run_dir, sample=0.5, seed=3)
    assert report.files_checked == 3
    assert len(report.problems) == 3


# -- object storage -----------------------------------------------------------


@pytest.mark.s3
def test_verify_on_s3_lists_the_output_once(tmp_path, s3):
    cfg, _ = s3_run_config(tmp_path, s3)
    prepare_run(cfg, main_process=True, dryrun=True)
    label(tmp_path / "run")
    s3.reset()
    report = check(tmp_path / "run", complete=True)
    assert report.ok and not report.warnings, report.lines()
    assert report.files_checked == 6
    log = s3.server.log(s3.name)
    lists = [r for r in log if r.kind == "LIST"]
    assert len(lists) == 2  # one of the output, one of the input (files changed in place)
    assert {r.kind for r in log} <= {"LIST", "GET"}  # no HEAD per file, no writes
    # A deleted sidecar is found on S3 too.
    s3.client().delete_object(
        Bucket=s3.name, Key="labels/" + outputs.SIDECAR.rel(report_rel(tmp_path))
    )
    assert {f.what for f in check(tmp_path / "run").problems} == {"marker without its sidecar"}


def report_rel(tmp_path: Path) -> str:
    return plan.load(tmp_path / "run").to_pydict()["file"][0]


# -- repair (issue 10) ---------------------------------------------------------------


def output_mtimes(labels: Path) -> dict[str, int]:
    return {str(p.relative_to(labels)): p.stat().st_mtime_ns for p in labels.rglob("*.*")}


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda path: path.unlink(), id="deleted-sidecar"),
        pytest.param(lambda path: path.write_bytes(path.read_bytes()[:40]), id="truncated-sidecar"),
    ],
)
def test_repair_relabels_only_the_broken_file(run, capsys, damage):
    damage(run.labels / outputs.SIDECAR.rel(run.rel))
    assert main(["verify", "--run-dir", str(run.run_dir)]) == 1
    out = capsys.readouterr().out
    assert f"fix: `shardwise verify --run-dir {run.run_dir} --repair`" in out
    before = output_mtimes(run.labels)
    assert main(["verify", "--run-dir", str(run.run_dir), "--repair"]) == 0
    out = capsys.readouterr().out
    marker = run.labels / outputs.MARKER.rel(run.rel)
    shard_marker = markers.shard_marker_path(run.run_dir, run.shard)
    assert f"removed {marker} (relabel {run.rel})" in out
    assert f"removed {shard_marker} (shard {run.shard} runs again)" in out
    assert not marker.exists() and not shard_marker.exists()
    label(run.run_dir, [run.shard])  # what the next snakemake run does
    after = output_mtimes(run.labels)
    changed = sorted(k for k in after if after[k] != before.get(k))
    written = [k.rel(run.rel) for k in outputs.kinds() if k.root == "output"]
    assert changed == sorted(written)  # every output of the file, and nothing else
    assert check(run.run_dir, complete=True).ok


def test_a_garbled_file_marker_is_found_and_repaired(run, capsys):
    from shardwise.ops.coverage import compute as coverage
    from shardwise.ops.jobs import retry_array

    (run.labels / outputs.MARKER.rel(run.rel)).write_bytes(b"\x00garbage")
    report = check(run.run_dir)
    assert report.broken_files == {run.rel}
    assert main(["verify", "--run-dir", str(run.run_dir), "--repair"]) == 0
    capsys.readouterr()
    cov = coverage.compute(coverage.load_state(run.run_dir))
    assert cov.files_done == len(run.files) - 1 and cov.shards_remaining == 1
    assert main(["retry-array", "--run-dir", str(run.run_dir)]) == 0
    assert (
        capsys.readouterr().out.strip()
        == retry_array.retry_lines([run.shard], total_shards=3, minimum_shard_index=0)[0]
    )


def test_a_garbled_shard_marker_is_not_done_for_coverage_and_retry(run, capsys):
    from shardwise.ops.coverage import compute as coverage

    markers.shard_marker_path(run.run_dir, run.shard).write_bytes(b"{not json")
    cov = coverage.compute(coverage.load_state(run.run_dir))
    assert cov.shards_done == 2 and cov.unreadable_markers == (
        str(markers.shard_marker_path(run.run_dir, run.shard)),
    )
    assert "unreadable 1 marker(s) count as not done" in format_table(cov)
    assert main(["retry-array", "--run-dir", str(run.run_dir)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(run.shard)
    assert "are unreadable and count as not done" in captured.err
    assert check(run.run_dir).broken_shards == {run.shard}
