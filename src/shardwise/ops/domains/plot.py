"""The domain picture: a pair's heatmap with marginal bars, as in the WebOrganizer paper.

Rows and columns are the two classifiers' labels sorted by share, each cell its share, the
bars the marginal shares with their 95% intervals; the title says what it is estimated from.
"""

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.ops.common import picture
from shardwise.ops.domains import render as domains_format
from shardwise.ops.domains.compute import TIMES, DomainData, Domains, compute, load

#: Picture size in inches (1400 x 1300 px).
FIGSIZE = (14.0, 13.0)
BAR_COLOUR = "#3b75af"
#: Cells with a share below this are left unlabelled (they would be unreadable).
MIN_LABELLED_SHARE = 0.001


def _marginal(
    data: DomainData, name: str, weight: str, labels: list[str]
) -> tuple[np.ndarray, ...]:
    """Share, low, high of each of ``labels`` for one classifier (estimated on its own)."""
    d = compute(data, classifier=name, weight=weight)
    where = {cell[0]: i for i, cell in enumerate(d.cell_labels)}
    idx = np.array([where.get(label, -1) for label in labels])
    pick = idx >= 0

    def take(a: np.ndarray) -> np.ndarray:
        out = np.zeros(len(labels))
        out[pick] = np.nan_to_num(a[idx[pick]])
        return out

    return take(d.est.share), take(d.est.low), take(d.est.high)


def render_png(data: DomainData, d: Domains) -> bytes:
    """The picture of view ``d`` as PNG bytes (a bar chart for a single classifier)."""
    fig = picture.figure(FIGSIZE if len(d.axes) > 1 else (10.0, 8.0))
    unit = "documents" if d.weight == "docs" else "text bytes"
    title = f"{TIMES.join(d.axes)}: share of {unit}, run {d.data.name}"
    fig.text(0.02, 0.985, title, fontsize=15, fontweight="bold", va="top")
    note = domains_format.status_line(d)
    if d.est.uncovered:
        note += f"; {len(d.est.uncovered)} categories not labelled yet (intervals widened)"
    fig.text(
        0.02, 0.955, note, fontsize=11, va="top", color="#333333" if d.est.exact else "#b45309"
    )
    if len(d.axes) == 1:
        _bars_only(fig, d)
    else:
        _heatmap(fig, data, d)
    return picture.png(fig)


def _bars_only(fig: Any, d: Domains) -> None:
    ax = fig.add_axes((0.28, 0.06, 0.68, 0.85))
    e = d.est
    order = np.argsort(-np.nan_to_num(e.share), kind="stable")
    order = order[np.nan_to_num(e.share[order]) > 0][:40][::-1]
    share = 100 * np.nan_to_num(e.share[order])
    err = 100 * np.vstack([share / 100 - e.low[order], e.high[order] - share / 100])
    ax.barh(
        np.arange(order.size),
        share,
        xerr=np.maximum(err, 0),
        color=BAR_COLOUR,
        error_kw={"ecolor": "#222222", "capsize": 2, "lw": 1},
    )
    ax.set_yticks(np.arange(order.size), [d.cell_labels[c][0] for c in order])
    ax.set_xlabel(f"% of {'documents' if d.weight == 'docs' else 'text bytes'} (95% CI)")
    ax.grid(axis="x", alpha=0.3)


def _heatmap(fig: Any, data: DomainData, d: Domains) -> None:
    rows_all, cols_all = d.labels[0], d.labels[1]
    width = max(len(cols_all), 1)
    share = np.nan_to_num(d.est.share).reshape(max(len(rows_all), 1), width)
    row_order = np.argsort(-share.sum(axis=1), kind="stable")
    col_order = np.argsort(-share.sum(axis=0), kind="stable")
    rows = [rows_all[i] for i in row_order]
    cols = [cols_all[j] for j in col_order]
    grid = share[np.ix_(row_order, col_order)] * 100
    heat = fig.add_axes((0.17, 0.15, 0.62, 0.57))
    top = fig.add_axes((0.17, 0.74, 0.62, 0.17), sharex=heat)
    right = fig.add_axes((0.80, 0.15, 0.17, 0.57), sharey=heat)
    image = heat.imshow(grid, cmap="Blues", aspect="auto", interpolation="nearest")
    image.set_clim(0, max(float(grid.max()), 1e-9))
    heat.set_xticks(np.arange(len(cols)), cols, rotation=60, ha="right", fontsize=9)
    heat.set_yticks(np.arange(len(rows)), rows, fontsize=9)
    heat.set_xlabel(d.axes[1])
    heat.set_ylabel(d.axes[0])
    limit = float(grid.max()) or 1.0
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            if grid[i, j] >= 100 * MIN_LABELLED_SHARE:
                colour = "white" if grid[i, j] > 0.6 * limit else "#222222"
                heat.text(
                    j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=6.5, color=colour
                )
    _marginal_bars(top, _marginal(data, d.axes[1], d.weight, cols), horizontal=False)
    _marginal_bars(right, _marginal(data, d.axes[0], d.weight, rows), horizontal=True)


def _marginal_bars(ax: Any, marginal: tuple[np.ndarray, ...], *, horizontal: bool) -> None:
    """Bars of the marginal shares with their 95% intervals (top: vertical, right)."""
    share, low, high = marginal
    err = 100 * np.vstack([np.maximum(share - low, 0), np.maximum(high - share, 0)])
    style = {"color": BAR_COLOUR, "error_kw": {"ecolor": "#222222", "capsize": 2, "lw": 1}}
    if horizontal:
        ax.barh(np.arange(share.size), 100 * share, xerr=err, **style)
        ax.set_xlabel("%")
        ax.tick_params(axis="y", labelleft=False)
    else:
        ax.bar(np.arange(share.size), 100 * share, yerr=err, **style)
        ax.set_ylabel("%")
        ax.tick_params(axis="x", labelbottom=False)
    ax.grid(axis="x" if horizontal else "y", alpha=0.3)


def report_figure(run_dir: Path) -> tuple[bytes, str, bool]:
    """The default view's picture and table for the HTML report, and whether there was
    anything to show; never raises: the report rule's PNG output must always exist."""
    try:
        data = load(run_dir)
        d = compute(data)
    except (ShardwiseError, OSError) as e:
        return placeholder_png(f"domain distribution: {e}"), str(e), False
    return render_png(data, d), domains_format.format_table(d), True


def placeholder_png(message: str) -> bytes:
    """A small picture holding one line of text."""
    fig = picture.figure((10.0, 1.5))
    fig.text(0.02, 0.5, textwrap.fill(message, 130), fontsize=11, va="center")
    return picture.png(fig)
