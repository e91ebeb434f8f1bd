"""The re-check threshold measured per job: the arithmetic, and the demo against fp32."""

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from e2e import SMALL, demo_models  # noqa: F401 - the session fixture

from shardwise.classify import calibration
from shardwise.classify.calibration import Calibration, margin_errors, spread
from shardwise.classify.shard_job import run_shard
from shardwise.demo.corpus import demo_config, write_corpus
from shardwise.run import plan
from shardwise.snakefile import prepare_run


def test_spread_covers_the_length_range():
    assert spread(10, 3).tolist() in ([0, 4, 9], [0, 5, 9])
    assert spread(3, 8).tolist() == [0, 1, 2]
    assert spread(5, 0).size == 0


def test_the_sample_is_64_first_then_a_tenth_up_to_256():
    cal = Calibration()
    assert cal.wanted(1000) == calibration.FIRST_FILE_DOCS == 64
    cal.add(np.zeros(64), np.ones(64, np.int64))
    assert cal.wanted(1000) == 100 and cal.wanted(5) == 1
    cal.add(np.zeros(190), np.ones(190, np.int64))
    assert cal.wanted(1000) == 2  # 256 in all
    cal.add(np.zeros(2), np.ones(2, np.int64))
    assert cal.wanted(1000) == 0


def test_margin_errors_are_taken_on_the_half_passes_top_two():
    half = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.9]])
    full = np.array([[3.1, 1.0, 5.0], [0.0, 1.8, 2.0]])  # row 1 flips
    np.testing.assert_allclose(margin_errors(half, full), [0.1, 0.3])


def test_thresholds_are_twice_the_largest_error_per_length_bucket():
    cal = Calibration()
    short = np.full(64, 0.01)
    long = np.full(64, 0.05)
    cal.add(np.concatenate([short, long]), np.concatenate([np.full(64, 10), np.full(64, 500)]))
    cut = 255  # the sample's median length
    assert cal.buckets() == [(cut, pytest.approx(0.02)), (2**31 - 1, pytest.approx(0.1))]
    got = cal.thresholds(np.array([5, cut, cut + 1, 9000]))
    np.testing.assert_allclose(got, [0.02, 0.02, 0.1, 0.1])
    small = Calibration()
    small.add(np.array([0.01, 0.03]), np.array([10, 500]))
    assert small.buckets() == [(2**31 - 1, pytest.approx(0.06))]  # too few for buckets


def test_the_residual_estimate_shrinks_with_the_margin_and_has_an_upper_bound():
    cal = Calibration()
    cal.add(np.full(256, 0.01), np.full(256, 100))
    near, near_up = cal.residual(np.array([0.02]))
    far, far_up = cal.residual(np.array([0.2]))
    assert 0 < far < near < 1 and near < near_up and far < far_up
    assert cal.residual(np.array([])) == (0.0, 0.0)


@pytest.mark.slow
def test_the_demo_in_bf16_with_auto_agrees_with_fp32(tmp_path, demo_models):  # noqa: F811
    """Every label of every classifier equals the fp32 run's (>= 99.9% required)."""
    write_corpus(tmp_path / "corpus", SMALL)
    outputs = {}
    for name, dtype in (("fp32", "float32"), ("bf16", "bfloat16")):
        cfg = demo_config(tmp_path, total_shards=3)
        cfg.update(run_dir=str(tmp_path / f"run-{name}"), output={"uri": str(tmp_path / name)})
        for c in cfg["classifiers"]:
            c["model"] = str(demo_models / c["name"])
        cfg["inference"].update(dtype=dtype, device="cpu", max_length=256)
        prepare_run(cfg, main_process=True, dryrun=True, report=False)
        run_dir = Path(cfg["run_dir"])
        for shard in sorted(plan.nonempty_shards(plan.load(run_dir))):
            run_shard(run_dir, shard, progress=False)
        outputs[name] = tmp_path / name
    names = ("topic", "topic_nourl", "format", "format_nourl")
    same = dict.fromkeys(names, 0)
    total = 0
    for path in sorted(outputs["fp32"].rglob("*.labels.parquet")):
        ref = pq.read_table(path)
        got = pq.read_table(outputs["bf16"] / path.relative_to(outputs["fp32"]))
        total += ref.num_rows
        for n in names:
            pairs = zip(ref[f"{n}_label"].to_pylist(), got[f"{n}_label"].to_pylist(), strict=True)
            same[n] += sum(a == b for a, b in pairs)
    assert total > 0
    for n in names:
        assert same[n] / total >= 0.999, (n, same[n], total)
