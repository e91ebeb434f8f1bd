"""The prepared GPU check's CPU-safe parts run in CI (``bench/gpu_check.py --cpu``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_check_cpu_smoke_mode_passes_and_reports_every_section(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        SHARDWISE_BENCH_CACHE=str(tmp_path / "bench"),
        SHARDWISE_MODEL_CACHE=str(tmp_path / "models"),
    )
    for name in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS"):
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
