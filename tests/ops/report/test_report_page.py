"""report: a self-contained HTML page and a PNG of the expected size."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import numpy as np
import pytest
from synthrun import make_run

from shardwise.cli.main import main
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.report import figure
from shardwise.run.sharding import shard_for_task


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _run(tmp_path: Path) -> Path:
    files = [f"src/cat{c}/part-{i:03d}.jsonl" for c in range(4) for i in range(60)]
    total = 40
    done = [f for f in files if shard_for_task(f, total) < 25 and not f.startswith("src/cat3/")]
    return make_run(
        tmp_path, files, total=total, done_files=done, name="pic",
        finished_at=lambda s: f"2026-01-01T{s % 24:02d}:{s % 60:02d}:00+00:00",
    )  # fmt: skip


def test_cli_writes_html_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _run(tmp_path)
    out = tmp_path / "out" / "report.html"
    assert main(["report", "--run-dir", str(run_dir), "--out", str(out), "--gpus", "4"]) == 0
    png_path = out.with_suffix(".png")
    assert capsys.readouterr().out.splitlines() == [f"wrote {out} and {png_path}"]
    png = png_path.read_bytes()
    assert _png_size(png) == (1600, 1000)
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert f"data:image/png;base64,{base64.b64encode(png).decode()}" in page
    assert "src/cat3" in page and "skew" in page
    assert 'src="http' not in page and "<link" not in page  # self-contained


def test_render_without_stats_or_markers(tmp_path: Path) -> None:
    files = [f"a/b/{i}.jsonl" for i in range(5)]
    run_dir = make_run(tmp_path, files, total=3)
    state = coverage.load_state(run_dir, read_stats=lambda: ())
    png = figure.render_png(state, coverage.compute(state), now=0.0)
    assert _png_size(png) == (1600, 1000)


def test_series(tmp_path: Path) -> None:
    state = coverage.load_state(_run(tmp_path))
    series = figure.completion_series(state)
    assert series.times.size == state.done_shards.size
    assert np.all(np.diff(series.times) >= 0)
    assert series.percent[-1] == pytest.approx(100.0 * state.done_shards.size / 40)
    rates = figure.rate_series(state.stats, bins=4)
    assert [r.device_name for r in rates] == ["NVIDIA H100 80GB HBM3"]
    assert np.nanmax(rates[0].docs_per_s) == pytest.approx(10.0)


def test_cli_missing_run_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--run-dir", str(tmp_path), "--out", str(tmp_path / "r.html")]) == 2
    assert "original run directory" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()
