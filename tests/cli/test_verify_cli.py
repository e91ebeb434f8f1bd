"""``shardwise verify``: what it prints where, and the exit code it decides from the
report and the typed advice (``ops/verify_repair.Advice``): 0 consistent, 1 problems
(with the fix), 2 cannot verify; ``--repair`` does the fix and says what is left."""

from __future__ import annotations

import json
from pathlib import Path

from inproc import label, plan_run

from shardwise.cli.main import main
from shardwise.ops.verify import check as verify
from shardwise.ops.verify import repair as verify_repair
from shardwise.run import outputs, plan


def _run(tmp_path: Path) -> tuple[Path, Path, str]:
    """A labelled in-process run; (run directory, output root, its first file)."""
    cfg = plan_run(tmp_path)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    return run_dir, tmp_path / "labels", plan.load(run_dir)["file"][0].as_py()


def test_a_consistent_run_exits_0_and_a_missing_run_dir_2(tmp_path, capsys):
    run_dir, _, _ = _run(tmp_path)
    assert main(["verify", "--run-dir", str(run_dir)]) == 0
    assert "verify OK" in capsys.readouterr().out
    assert main(["verify", "--run-dir", str(tmp_path / "nowhere")]) == 2
    assert f"cannot verify {tmp_path / 'nowhere'}" in capsys.readouterr().err


def test_problems_exit_1_with_the_advised_fix_and_repair_does_it(tmp_path, capsys):
    run_dir, labels, rel = _run(tmp_path)
    (labels / outputs.SIDECAR.rel(rel)).unlink()
    marker = labels / outputs.MARKER.rel(rel)
    advice = verify_repair.advise(run_dir, verify.verify_run(run_dir), repairing=False)
    assert (advice.broken, advice.rebuild, advice.stop) == (1, 0, False)
    assert main(["verify", "--run-dir", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert f"{marker}: marker without its sidecar" in out
    assert out.rstrip().endswith(advice.lines[-1])  # the fix is the advice, printed last
    assert advice.lines[-1].startswith(f"fix: `shardwise verify --run-dir {run_dir} --repair`")
    assert marker.exists()  # verify alone changes nothing
    assert main(["verify", "--run-dir", str(run_dir), "--repair"]) == 0
    out = capsys.readouterr().out
    assert f"removed {marker} (relabel {rel})" in out
    assert "repaired: run `snakemake` (with your profile) to relabel them" in out
    assert "fix:" not in out and not marker.exists()


def test_json_keeps_stdout_one_document_and_the_fix_goes_to_stderr(tmp_path, capsys):
    run_dir, labels, rel = _run(tmp_path)
    (labels / outputs.STATS.rel(rel)).unlink()
    assert main(["verify", "--run-dir", str(run_dir), "--format", "json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ok"] is False
    assert captured.err.startswith("fix: `shardwise verify")
