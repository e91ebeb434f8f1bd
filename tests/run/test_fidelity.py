"""A run's fidelity to fp32, summed from each file's stats."""

import pytest

from shardwise.run import fidelity


def entry(name, docs, fp32, residual, upper, mode="recheck", small=False):
    return {"classifier": name, "docs": docs, "fp32_docs": fp32, "mode": mode,
            "residual": residual, "residual_upper": upper, "margin_too_small": small}  # fmt: skip


def test_totals_sum_per_classifier_and_keep_unmeasured_files_apart():
    files = [
        [entry("topic", 100, 10, 0.01, 0.02), entry("format", 100, 100, 0.0, 0.0, "float32")],
        [entry("topic", 300, 30, 0.03, 0.06)],
        [entry("topic", 600, 6, None, None, "pinned", small=True)],
        [],
    ]
    topic, fmt = fidelity.totals(files)
    assert (topic.classifier, topic.docs, topic.fp32_docs, topic.unmeasured_docs) == (
        "topic", 1000, 46, 600)  # fmt: skip
    assert topic.residual_share == pytest.approx(0.04 / 400)
    assert topic.residual_upper_share == pytest.approx(0.08 / 400)
    assert topic.too_small_files == 1 and topic.flagged  # a pinned margin found too small
    assert (fmt.fallback_files, fmt.fp32_share, fmt.flagged) == (1, 1.0, False)


def test_a_run_estimated_above_the_target_is_flagged():
    [f] = fidelity.totals([[entry("topic", 1000, 0, 0.5, 2.0)]])
    assert f.residual_upper_share == 0.002 > fidelity.TARGET_RESIDUAL
    assert f.flagged
