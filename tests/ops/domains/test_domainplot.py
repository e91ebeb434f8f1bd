"""The domain picture: a pair's heatmap with marginal bars, a classifier's bar chart."""

from __future__ import annotations

import io

import numpy as np
import pytest
from domainsynth import make_corpus, write_run
from matplotlib.image import imread

from shardwise.ops.domains import compute as domains
from shardwise.ops.domains import plot as domainplot


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(seed=5, tasks=300, total_shards=30)


def pixels(png: bytes) -> tuple[int, int]:
    """(width, height) of a PNG."""
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    height, width = imread(io.BytesIO(png)).shape[:2]
    return width, height


def test_a_pair_is_drawn_as_the_heatmap_and_a_classifier_as_bars(tmp_path, corpus):
    data = domains.load(write_run(tmp_path, corpus, np.arange(0, 30, 3)))
    pair = domains.compute(data)
    assert len(pair.axes) == 2
    assert pixels(domainplot.render_png(data, pair)) == (1400, 1300)
    one = domains.compute(data, classifier="topic")
    assert pixels(domainplot.render_png(data, one)) == (1000, 800)


def test_the_marginal_bars_of_a_heatmap_are_each_classifier_estimated_alone(tmp_path, corpus):
    data = domains.load(write_run(tmp_path, corpus, range(30)))  # all done: exact shares
    pair = domains.compute(data)
    rows = pair.labels[0]
    share, low, high = domainplot._marginal(data, pair.axes[0], "docs", rows)
    alone = domains.compute(data, classifier=pair.axes[0])
    expected = {cell[0]: s for cell, s in zip(alone.cell_labels, alone.est.share, strict=True)}
    assert share == pytest.approx([np.nan_to_num(expected.get(r, 0.0)) for r in rows])
    assert (low == share).all() and (high == share).all()  # exact: no interval left
    assert share.sum() == pytest.approx(1.0)


def test_the_report_figure_is_a_placeholder_saying_why_when_nothing_is_labelled(tmp_path, corpus):
    run_dir = write_run(tmp_path, corpus, [])
    png, text, found = domainplot.report_figure(run_dir)
    assert not found
    assert "none of the 0 finished shards" in text or "summaries" in text
    assert pixels(png) == (1000, 150)


def test_the_report_figure_carries_the_table_when_shards_are_done(tmp_path, corpus):
    png, text, found = domainplot.report_figure(write_run(tmp_path, corpus, range(0, 30, 2)))
    assert found
    assert pixels(png) == (1400, 1300)
    assert text.splitlines()[0].startswith(f"topic{domains.TIMES}format: share of docs, estimated")
