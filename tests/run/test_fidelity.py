"""A run's fidelity to fp32, summed from each file's stats."""

import pyarrow as pa
import pytest

from shardwise.run import fidelity


def entry(name, docs, fp32, residual, upper, mode="recheck", small=False):
    return fidelity.FileFidelity(
        classifier=name,
        docs=docs,
        fp32_docs=fp32,
        mode=mode,
        residual=residual,
        residual_upper=upper,
        margin_too_small=small,
    )


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


def test_the_bulk_readers_type_is_the_records_fields():
    """The Arrow type of an entry follows the record: a new field is one line there."""
    assert fidelity.ARROW.names == [f for f in fidelity.FileFidelity.__dataclass_fields__]
    assert fidelity.ARROW.field("docs").type == pa.float64()
    assert fidelity.ARROW.field("on_cpu").type == pa.bool_()


def test_a_row_of_the_bulk_reader_reads_as_the_record_and_never_raises():
    row = {"classifier": "topic", "docs": 4.0, "fp32_docs": None, "mode": "pinned",
           "residual": None, "residual_upper": float("nan"), "on_cpu": None}  # fmt: skip
    got = fidelity.FileFidelity.from_row(row)
    assert (got.docs, got.fp32_docs, got.residual, got.on_cpu) == (4, 0, None, False)
    assert fidelity.rows([row, row]) == [got, got] and fidelity.rows(None) == []
