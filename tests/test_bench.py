"""Every benchmark under bench/ runs in CI at a tiny size, so none can rot unnoticed.

Each smoke run asserts that the script finished and printed its figures, never what
they are: the figures belong to a full run on a quiet machine (docs/engine.md's benchmarks name the
command behind each). ``bench/gpu-check.sh`` has its own smoke run (test_gpu_check.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
NUMBER = r"\d+(?:\.\d+)?"

pytestmark = pytest.mark.slow


def bench(tmp_path: Path, script: str, *args: str, timeout: float = 600) -> str:
    """Run ``bench/<script> ARGS`` from bench/ (as its docstring says); its stdout."""
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        SHARDWISE_BENCH_CACHE=str(tmp_path / "cache"),
        SHARDWISE_MODEL_CACHE=str(tmp_path / "models"),
        MPLBACKEND="Agg",
    )
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=BENCH,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_bench_dryrun_prints_the_scaling_table_with_the_bare_snakefile_beside(tmp_path):
    out = bench(tmp_path, "dryrun.py", "--files", "40,80", "--shards", "4", "--dir",
                str(tmp_path / "dryrun"))  # fmt: skip
    assert "bare Snakefile, same targets" in out
    rows = re.findall(rf"^\s+(\d+) / (\d+)\s+{NUMBER} s / +\d+ MB .* {NUMBER} s / +\d+ MB$", out,
                      re.MULTILINE)  # fmt: skip
    assert rows == [("40", "4"), ("80", "4")], out
    assert re.search(rf"first dry run, 80 / 4 vs 40 / 4: {NUMBER}x", out), out
    assert re.search(rf"shardwise's own share at 40 / 4: -?{NUMBER} s of {NUMBER} s", out), out


def test_bench_coverage_prints_in_process_and_cli_times(tmp_path):
    out = bench(tmp_path, "coverage.py", "--files", "200", "--shards", "20", "--report",
                "--dir", str(tmp_path / "coverage"))  # fmt: skip
    assert "coverage table, 200 files / 20 shards, half done:" in out
    for what in ("in-process first call", "in-process warm (min3)"):
        assert re.search(rf"{re.escape(what)}\s+{NUMBER} s wall, {NUMBER} s CPU", out), out
    assert re.search(rf"fresh interpreter, CLI {NUMBER} s", out), out
    assert re.search(rf"report \(HTML\+PNG\)\s+{NUMBER} s", out), out
    assert (tmp_path / "coverage" / "report.png").stat().st_size > 0


def test_bench_domains_prints_each_fresh_cli_time(tmp_path):
    out = bench(tmp_path, "domains.py", "--files", "200", "--shards", "20",
                "--dir", str(tmp_path / "domains"))  # fmt: skip
    assert re.search(r"200 files / 20 shards, half done: \d+ summaries", out), out
    assert re.search(rf"in-process load \+ compute \(topic x format\)\s+{NUMBER} s", out), out
    assert len(re.findall(rf"fresh CLI: .* {NUMBER} s wall, {NUMBER} s CPU", out)) == 6, out


def test_bench_classify_prints_rates_ratios_padding_and_mfu(tmp_path):
    out = bench(tmp_path, "classify.py", "--shapes", "tiny", "--docs", "30", "--max-length",
                "64", "--threads", "1")  # fmt: skip
    for engine in ("(a) fixed 32", "(b) sorted, fixed 32", "(c) shardwise engine"):
        assert re.search(rf"{re.escape(engine)}.* {NUMBER} docs/s .* {NUMBER} tokens/s", out), out
    assert re.search(rf"c/a = {NUMBER}", out) and re.search(rf"c/b = {NUMBER}", out), out
    assert re.search(r"padded tokens: \(b\) \d+ .*\(c\) \d+", out), out
    assert re.search(rf"MFU \(c, inference time {NUMBER} s\): {NUMBER}", out), out


def test_bench_precision_prints_agreement_cost_and_the_margin_table(tmp_path):
    out = bench(tmp_path, "precision.py", "--docs", "24", "--hidden-size", "32", "--layers",
                "1", "--heads", "2", "--max-length", "64", "--threads", "1",
                "--file-docs", "8")  # fmt: skip
    assert re.search(rf"argmax agreement over \d+ labels .* without re-check {NUMBER}", out), out
    assert re.search(r"calibration topic: \d+ docs, max error .* threshold .*, mode \w+", out), out
    assert re.search(rf"the calibration sample {NUMBER} s = {NUMBER}%", out), out
    assert re.search(rf"\(half\+re-check\)/half = {NUMBER}, \(half\+re-check\)/fp32 = {NUMBER}",
                     out), out  # fmt: skip
    assert len(re.findall(rf"^\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}$", out, re.MULTILINE)) >= 5, out


def test_bench_dolma_export_prints_files_per_second_locally_and_on_s3(tmp_path):
    out = bench(tmp_path, "dolma_export.py", "--files", "12", "--docs", "5", "--jobs", "2")
    assert re.search(rf"local +{NUMBER} files/s", out), out
    assert re.search(rf"S3 \(moto\) +{NUMBER} files/s", out), out
    assert re.search(rf"S3 / local: {NUMBER}x", out), out


def test_bench_long_docs_prints_each_size_against_the_smallest(tmp_path):
    out = bench(tmp_path, "long_docs.py", "--sizes", "5e3,2e5")
    assert "one document, max_length 128, two classifiers, CPU; ratios to 5,000 characters" in out
    rows = re.findall(rf"^\s+([\d,]+)(?:\s+{NUMBER}){{10}}\s+yes$", out, re.MULTILINE)
    assert rows == ["5,000", "200,000"], out  # the batched count equals the whole text's


def test_bench_selection_prints_rows_per_second_and_peak_memory_per_size(tmp_path):
    out = bench(tmp_path, "selection.py", "--sizes", "2e3,2e4", "--rows-per-file", "1000")
    line = rf"^\s+([\d,]+)\s+{NUMBER}\s+[\d,]+\s+{NUMBER}\s+{NUMBER}MB\s+{NUMBER}\s+[\d,]+$"
    rows = re.findall(line, out, re.MULTILINE)
    assert rows == ["2,000", "20,000"], out


def test_bench_tokencount_prints_docs_per_second_with_and_without_the_tokenizer(tmp_path):
    out = bench(tmp_path, "tokencount.py", "--files", "1", "--docs", "5", "--repeats", "1")
    assert re.search(rf"^without domains.tokenizer +{NUMBER} docs/s$", out, re.MULTILINE), out
    assert re.search(rf"^with domains.tokenizer +{NUMBER} docs/s$", out, re.MULTILINE), out
    assert re.search(rf"with / without: {NUMBER}x the rate", out), out


def test_bench_scheduling_prints_a_round_with_and_without_the_subsample(tmp_path):
    out = bench(tmp_path, "scheduling.py", "--ready", "1500", "--free", "20", "--subsample", "100")
    assert re.search(rf"^\s+1,500\s+{NUMBER} s\s+{NUMBER} s\s+{NUMBER}x$", out, re.MULTILINE), out


def test_bench_startup_prints_each_stage_and_the_share_of_a_shard(tmp_path):
    out = bench(
        tmp_path,
        "startup.py",
        "--jobs",
        "2",
        "--device",
        "cpu",
        "--attention",
        "packed",
        "--compile",
        "on",
    )
    assert re.search(r"start-up per shard job on cpu \(float32, packed, compiled\)", out), out
    rows = re.findall(rf"^\s+[12]\s+{NUMBER}s\s+{NUMBER}s\s+{NUMBER}s\s+{NUMBER}s\s+{NUMBER}s "
                      rf"{NUMBER}% of a 360 s shard", out, re.M)  # fmt: skip
    assert len(rows) == 2, out
    assert "models loaded per job: 4" in out, out
    assert re.search(rf"first call \(self-check\): cold {NUMBER} s \(job 1\), warm {NUMBER} s", out)
    # cold compiles with no cache at all; warm unpacks the first job's artifact: no compile
    cold = r"^job 1's kernels: compiled \(Inductor's cache: 0 hit\(s\), [1-9]\d* graph"
    warm = r"^job 2's kernels: artifact \(Inductor's cache: [1-9]\d* hit\(s\), 0 graph"
    assert re.search(cold, out, re.M) and re.search(warm, out, re.M), out


def test_bench_cpu_feed_prints_each_stage_the_overlap_and_the_cores(tmp_path):
    out = bench(tmp_path, "cpu_feed.py", "--docs", "60", "--files", "3")
    stage = rf"read {NUMBER}(,\d+)*, tokenize {NUMBER}(,\d+)*, write {NUMBER}(,\d+)*"
    assert re.search(rf"documents/s per core: {stage}; read \+ tokenize", out), out
    assert re.search(rf"sequential {NUMBER} s, overlapped {NUMBER} s: {NUMBER}x", out), out
    assert re.search(rf"cores for 930 documents/s: {NUMBER} for the reader thread's", out), out


@pytest.mark.s3
def test_bench_campaign_sites_two_sites_each_file_once_and_a_dead_sites_shard_moves(tmp_path):
    """bench/campaign.py --sites's smoke run (no cluster): the two-site cell's figures."""
    out = tmp_path / "sites.json"
    text = bench(tmp_path, "campaign.py", "--sites", "--json", str(out))
    cell = json.loads(out.read_text())
    together, dies = cell["together"], cell["a_dies"]
    assert together["files_labelled_twice"] == 0 and together["takeovers"] == 0
    assert all(site["files_labelled"] > 0 for site in together["sites"].values())
    assert sum(site["files_labelled"] for site in together["sites"].values()) == together["files"]
    assert dies["files_labelled_twice"] == 0 and dies["takeovers"] == 1
    assert 0 < dies["death_to_takeover_s"] <= dies["death_to_end_s"]
    assert re.search(rf"moved {NUMBER} s after site a was killed \(lease 3 s\)", text), text
