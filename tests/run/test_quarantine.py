"""``shardwise quarantine``: a file left out of a run, shown apart everywhere, reversible."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from inproc import FakeEngine, label, plan_run

from shardwise.classify.shard_job import run_shard
from shardwise.cli.main import main
from shardwise.errors import ConfigError
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage.render import format_table, to_dict
from shardwise.ops.report import page as report
from shardwise.ops.verify import check as verify
from shardwise.run import claims, markers, outputs, plan, quarantine
from shardwise.snakefile import prepare_run


def busiest_shard(run_dir: Path) -> tuple[int, list[str]]:
    """The shard with the most files, and its files (the quarantine needs neighbours)."""
    table = plan.load(run_dir)
    shard = max(plan.nonempty_shards(table), key=lambda s: plan.files_of_shard(table, s).num_rows)
    return shard, plan.files_of_shard(table, shard)["file"].to_pylist()


@pytest.fixture
def planned(tmp_path: Path):
    cfg = plan_run(tmp_path, total_shards=2)
    run_dir = Path(cfg["run_dir"])
    shard, files = busiest_shard(run_dir)
    assert len(files) >= 2
    return cfg, run_dir, shard, files


def test_a_quarantined_file_is_left_out_and_its_shard_finishes(planned, tmp_path, capsys):
    cfg, run_dir, shard, files = planned
    bad, neighbours = files[0], files[1:]
    assert main(["quarantine", "--run-dir", str(run_dir), bad, "--reason", "truncated upload"]) == 0
    assert f"quarantined {bad}: truncated upload" in capsys.readouterr().out
    label(run_dir)
    labels = tmp_path / "labels"
    assert not (labels / outputs.SIDECAR.rel(bad)).exists()
    marker = json.loads(markers.shard_marker_path(run_dir, shard).read_text())
    assert marker["quarantined"] == 1 and marker["files"] == len(files)
    stamps = {rel: (labels / outputs.MARKER.rel(rel)).stat().st_mtime_ns for rel in neighbours}
    label(run_dir, [shard])  # a rerun of the shard labels the neighbours once, not again
    assert stamps == {
        rel: (labels / outputs.MARKER.rel(rel)).stat().st_mtime_ns for rel in neighbours
    }

    cov = coverage.compute(coverage.load_state(run_dir))
    assert (cov.shards_remaining, cov.files_quarantined, cov.files_done) == (
        0,
        1,
        cov.files_total - 1,
    )
    assert [(e.file, e.reason) for e in cov.quarantined] == [(bad, "truncated upload")]
    table = format_table(cov)
    assert (
        f"quarantined 1 file(s) left out of the run, not labelled: {bad} (truncated upload)"
        in table
    )
    assert to_dict(cov)["quarantined"][0]["file"] == bad

    assert main(["retry-array", "--run-dir", str(run_dir)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing to retry: the report and retry-array agree
    assert "1 quarantined file(s) are left out of this run and need no retry" in captured.err

    html = report.render_html(cov, b"")
    assert "Quarantined files (1)" in html and "truncated upload" in html

    result = verify.verify_run(run_dir, complete=True)
    assert result.ok, result.lines()
    assert result.files_quarantined == 1
    assert [f.what for f in result.quarantined] == ["truncated upload"]

    out = io.StringIO()
    prepare_run(cfg, main_process=True, dryrun=True, out=out)
    assert f"quarantined 1 file(s) left out of the run, not labelled: {bad}" in out.getvalue()


def test_release_reopens_the_shard_so_the_next_run_labels_the_file(planned, tmp_path, capsys):
    _cfg, run_dir, shard, files = planned
    quarantine.add(run_dir, [files[0]], "looked broken")
    label(run_dir)
    assert markers.shard_marker_path(run_dir, shard).exists()
    assert main(["quarantine", "--run-dir", str(run_dir), "--release", files[0]]) == 0
    out = capsys.readouterr().out
    assert f"released {files[0]}" in out and f"reopened shard(s) {shard}" in out
    assert quarantine.load(run_dir) == {}
    label(run_dir, [shard])
    assert (tmp_path / "labels" / outputs.SIDECAR.rel(files[0])).exists()
    assert "quarantined" not in json.loads(markers.shard_marker_path(run_dir, shard).read_text())


def test_names_may_carry_the_input_root_and_unknown_ones_get_a_suggestion(planned, tmp_path):
    _cfg, run_dir, _shard, files = planned
    added = quarantine.add(run_dir, [str(tmp_path / "corpus" / files[0])], "x")
    assert [e.file for e in added] == [files[0]]
    typo = files[1][:-2]
    with pytest.raises(ConfigError, match=rf"{typo!r} \(did you mean {files[1]!r}\?\)"):
        quarantine.add(run_dir, [typo], "x")


def test_an_already_labelled_file_cannot_be_quarantined(planned):
    _cfg, run_dir, shard, files = planned
    label(run_dir, [shard])
    with pytest.raises(ConfigError, match="already labelled.*verify --run-dir .* --repair"):
        quarantine.add(run_dir, [files[0]], "x")


def test_the_list_says_what_why_when_and_who(planned, capsys):
    _cfg, run_dir, _shard, files = planned
    quarantine.add(run_dir, files[:2], "vendor lost the originals")
    assert main(["quarantine", "--run-dir", str(run_dir), "--list", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)["files"]
    assert [e["file"] for e in listed] == sorted(files[:2])
    assert {e["reason"] for e in listed} == {"vendor lost the originals"}
    assert all(e["at"] and "@" in e["by"] for e in listed)


def test_a_reason_is_required(planned):
    _cfg, run_dir, _shard, files = planned
    with pytest.raises(SystemExit) as info:
        main(["quarantine", "--run-dir", str(run_dir), files[0]])
    assert info.value.code == 2


class QuarantiningEngine(FakeEngine):
    """A fake engine that quarantines files while the job labels: at its first file,
    that file itself (quarantined while it is labelled) and a later one (before it)."""

    def __init__(self, run_dir: Path, now: str, later: str) -> None:
        super().__init__()
        self.run_dir, self.pending = run_dir, [now, later]

    def run(self, n: int):
        if self.pending:
            assert main(["quarantine", "--run-dir", str(self.run_dir), *self.pending,
                         "--reason", "found broken"]) == 0  # fmt: skip
            self.pending = []
        return super().run(n)


def test_a_quarantine_made_while_a_job_labels_the_shard_wins_and_every_view_agrees(
    tmp_path, capsys
):
    """Quarantined while it is labelled, and before it is reached: neither file gets a
    marker or a sidecar; after: a labelled file is refused. coverage and verify count the
    same files, and coverage's documents are those files' documents."""
    cfg = plan_run(tmp_path, total_shards=1)
    run_dir = Path(cfg["run_dir"])
    _shard, files = busiest_shard(run_dir)
    now, kept, later = files[0], files[1], files[2]
    engine = QuarantiningEngine(run_dir, now, later)
    with claims.held(run_dir, 0) as claim:  # as the classify rule holds it
        report = run_shard(run_dir, 0, engine_factory=lambda _ctx: engine, progress=False)
    assert (report.quarantined, report.labelled) == (2, len(files) - 2)
    said = capsys.readouterr().out
    assert f"shard 0 is being labelled by {claim.holder()}: it leaves the file(s) out" in said
    labels = tmp_path / "labels"
    for rel in (now, later):
        assert not (labels / outputs.MARKER.rel(rel)).exists()
        assert not (labels / outputs.SIDECAR.rel(rel)).exists()
    assert main(["quarantine", "--run-dir", str(run_dir), kept, "--reason", "late"]) == 1
    assert "already labelled" in capsys.readouterr().err
    cov = coverage.compute(coverage.load_state(run_dir))
    assert (cov.files_done, cov.files_quarantined) == (len(files) - 2, 2)
    docs = sum(json.loads((labels / f"{rel}.stats.json").read_text())["docs"]
               for rel in files if rel not in (now, later))  # fmt: skip
    assert cov.docs_done == docs
    result = verify.verify_run(run_dir, complete=True)
    assert result.ok, result.lines()
    assert (result.files_marked, result.files_quarantined) == (len(files) - 2, 2)
