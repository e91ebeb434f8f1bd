"""The prepared GPU check's CPU-safe parts run in CI: the full check's ``--cpu`` smoke run,
``--prepare``, ``--quick`` without CUDA, and the quick check's sections at a tiny shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from shardwise.classify.device import GPU_ENV_VARS

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_check_cpu_smoke_mode_passes_and_reports_every_section(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        SHARDWISE_BENCH_CACHE=str(tmp_path / "bench"),
        SHARDWISE_MODEL_CACHE=str(tmp_path / "models"),
    )
    for name in GPU_ENV_VARS:
        env.pop(name, None)
    proc = subprocess.run(
        [str(REPO / "bench" / "gpu-check.sh"), "--cpu"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads(proc.stdout)
    assert summary["ok"] is True and summary["failures"] == []
    assert summary["environment"]["auto_device"] == "cpu"
    assert summary["cuda_tests"].get("passed", 0) == 0 and summary["cuda_tests"]["skipped"] > 0
    bench = summary["benchmark"]
    assert bench["docs"] == 120 and bench["docs_per_s"] > 0 and 0 < bench["mfu"] < 1
    assert bench["pad_efficiency"] > 0.9 and bench["attention_kernel"] != "math"
    for dtype in ("bfloat16", "float16"):
        row = summary["agreement"][dtype]
        assert row["agreement_recheck"] >= 0.999, row
        assert row["agreement_plain"] <= row["agreement_recheck"]
    for section in ("probe", "no_per_batch_sync", "oom_drill"):
        assert summary[section] == {"skipped": "needs CUDA"}
    assert summary["overlap"]["same_labels"] is True
    demo = summary["demo_workflow"]
    assert demo["verify_returncode"] == 0 and demo["devices"] == ["cpu"] and demo["files"] > 0


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        SHARDWISE_BENCH_CACHE=str(tmp_path / "bench"),
        SHARDWISE_MODEL_CACHE=str(tmp_path / "models"),
        SHARDWISE_GPU_WHEELS=str(tmp_path / "wheels"),
    )
    for name in GPU_ENV_VARS:
        env.pop(name, None)
    return env


def _check(tmp_path: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / "bench" / "gpu-check.sh"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(tmp_path),
        check=False,
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_quick_without_cuda_stops_at_once_in_one_line(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = _check(tmp_path, "--quick", timeout=60)
    assert time.monotonic() - started < 60
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("gpu-check --quick: CUDA is not available here (torch ")
    assert "run it on a node with one CUDA GPU" in line and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_prepare_makes_the_wheels_a_gpu_node_without_network_lacks(tmp_path: Path) -> None:
    proc = _check(tmp_path, "--prepare")
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheels = sorted(p.name for p in (tmp_path / "wheels").iterdir())
    pins = {"transformers": "5.23.0", "tokenizers": "0.23.3", "zstandard": "0.25.0"}
    for name, version in pins.items():
        assert any(w.startswith(f"{name}-{version}-") for w in wheels), wheels
    assert any(w.startswith("shardwise-") for w in wheels), wheels
    assert all("cp311" not in w for w in wheels)  # built for the GPU image's Python 3.12
    size = sum(p.stat().st_size for p in (tmp_path / "wheels").iterdir())
    assert size < 64 * 2**20
    assert "carry" in proc.stderr and "--quick" in proc.stderr


@pytest.mark.slow
def test_the_rehearsal_runs_every_section_in_a_venv_like_the_lent_image(tmp_path: Path) -> None:
    """``--rehearse``: the quick check as a lent GPU node runs it (the preflight, then every
    section, at the CPU's tiny shape) in a venv of the image's packages (an older
    pyarrow and transformers than the project pins, no snakemake) with only the wheels
    ``--prepare`` carries. The summary says ok."""
    env = _env(tmp_path) | {"SHARDWISE_REHEARSAL": str(tmp_path / "rehearsal")}
    proc = subprocess.run(
        [str(REPO / "bench" / "gpu-check.sh"), "--rehearse"],
        capture_output=True,
        text=True,
        timeout=1500,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["ok"] and summary["failures"] == []
    packages = summary["environment"]["packages"]
    assert packages["pyarrow"] == "21.0.0" and packages["numpy"] == "2.3.5"  # the image's
    assert packages["transformers"] == "5.23.0"  # the carried pin, over the image's 5.17.0
    assert packages["shardwise_from"].startswith(str(tmp_path / "rehearsal" / "site"))
    assert packages["snakemake"] is None and packages["jsonschema"] is None
    assert set(summary["throughput"]) >= {"shapes", "topic", "format_nourl"}
    topic = summary["throughput"]["topic"]
    for mode in ("padded", "packed", "compiled"):
        for shape in ("fixed_512", "mix"):
            key = f"{mode}_{shape}"
            assert topic[key]["tokens_per_s"] > 0 and "mfu" in topic[key]
    assert topic["packed_mix"]["attention"] == "packed" and topic["self_check_packed"][0]["passed"]
    assert topic["compiled_mix"]["compiled"] and topic["self_check_compiled"][0]["passed"]
    assert topic["compile_s"] > 0 and "compiled_over_padded_mix" in topic
    assert set(summary["agreement"]["format"]) == {"bf16_padded", "bf16_packed"}
    jobs = summary["startup"]["jobs"]
    assert len(jobs) == 2 and all(0 < job["share"] < 1 for job in jobs)
    # cold means cold: no compile cache at all; warm: the first job's artifact, no compile
    compiled = summary["startup"]["compile"]
    assert (compiled["cold_source"], compiled["warm_source"]) == ("compiled", "artifact")
    assert compiled["cold_kernels"][1] > 0 and compiled["warm_kernels"][1] == 0
    for row in summary["recheck"].values():
        if isinstance(row, dict):
            assert 0 <= row["recheck_share"] <= 1 and row["tokens_per_s_with"] > 0


def _bench_module(name: str):
    """A module of bench/ (not a package), imported as the check imports it."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(REPO / "bench"))


def test_a_section_that_exits_is_recorded_and_the_summary_so_far_is_kept(tmp_path: Path) -> None:
    gpu_check = _bench_module("gpu_check")
    keep = tmp_path / "out" / "gpu-quick.json"
    check = gpu_check.Check(cuda=False, deadline=time.monotonic() + 60, keep=keep)

    def exits() -> dict:
        raise SystemExit(2)  # what a failing start-up child raises

    check.section("first", lambda: {"value": 1})
    assert json.loads(keep.read_text())["first"]["value"] == 1  # kept before the next one
    check.section("exits", exits)
    check.section("after", lambda: {"value": 3})
    check.section("late", lambda: {"value": 4}, needs_s=3600)  # cannot end by the deadline
    kept = json.loads(keep.read_text())
    assert kept["exits"]["error"] == "SystemExit: 2" and kept["after"]["value"] == 3
    assert kept["late"]["skipped"].startswith("out of time") and not kept["ok"]
    assert kept["failures"] == ["exits: SystemExit: 2", "late: not run, out of time"]


def test_the_preflight_names_every_missing_module_in_one_line(monkeypatch, capsys) -> None:
    gpu_quick = _bench_module("gpu_quick")
    monkeypatch.setattr(
        gpu_quick, "CARRIED", (*gpu_quick.CARRIED, ("no_such_mod_a", "a"), ("no_such_mod_b", "b"))
    )
    with pytest.raises(SystemExit) as stopped:
        gpu_quick.preflight_or_exit()
    assert stopped.value.code == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert "no_such_mod_a missing" in line and "no_such_mod_b missing" in line
    assert "bench/gpu-check.sh --prepare" in line


@pytest.mark.slow
def test_a_quick_check_killed_partway_leaves_its_summary_so_far(tmp_path: Path) -> None:
    """``kill -9`` once the first section is kept (the event): ``$OUT/gpu-quick.json``
    holds every section that ended, as valid JSON."""
    env = _env(tmp_path) | {"OUT": str(tmp_path / "out")}
    keep = tmp_path / "out" / "gpu-quick.json"
    proc = subprocess.Popen(
        [sys.executable, "gpu_quick.py", "--cpu"],
        cwd=REPO / "bench",
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not keep.exists() and proc.poll() is None:
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    kept = json.loads(keep.read_text())
    assert kept["environment"]["auto_device"] == "cpu"
    assert {"varlen_attn", "flash_impl", "fa3_importable"} <= set(kept["environment"])
