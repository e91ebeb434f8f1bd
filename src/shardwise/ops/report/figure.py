"""The report's picture: a headline (how far, how long, what is wrong), completion per
category (skewed ones in red), shards done over time with the ETA, and throughput per GPU
type over time (a slow partition shows as a step). matplotlib is imported inside the
functions (~0.3 s).
"""

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.ops.common import picture
from shardwise.ops.common.text import format_duration, human_count
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage import read as coverage_state
from shardwise.run import statstable

#: Figure size in inches: the PNG is 1600 x 1000 pixels.
FIGSIZE = (16.0, 10.0)
#: Categories drawn as bars; the rest are summarised in one line.
MAX_BARS = 30
MIN_ROWS = 15
#: A run with work left and no shard finished for this long is called stalled.
STALE_AFTER_S = 6 * 3600

OK_COLOUR = "#3b75af"
FLAG_COLOUR = "#d62728"
TRACK_COLOUR = "#e6e6e6"
DEVICE_COLOURS = ("#3b75af", "#ef8636", "#519e3e", "#8d69b8", "#c5b13a", "#84584e")


@dataclass(frozen=True, eq=False)
class CompletionSeries:
    """Percent of shards done after each shard marker, in time order."""

    times: np.ndarray  # POSIX seconds, ascending
    percent: np.ndarray  # 0-100, after that marker
    undated: int  # markers without a readable finished_at (not plotted)


def completion_series(state: coverage_state.RunState) -> CompletionSeries:
    """Cumulative shard completion from the markers' ``finished_at``."""
    when = state.markers.finished_at
    dated = np.sort(when[np.isfinite(when)])
    undated = int(when.size - dated.size)
    # Undated markers are counted from the start so the curve ends at the true total.
    percent = 100.0 * (undated + np.arange(1, dated.size + 1)) / max(state.total_shards, 1)
    return CompletionSeries(times=dated, percent=percent, undated=undated)


@dataclass(frozen=True, eq=False)
class RateSeries:
    """Median docs/s per GPU in time bins, for one GPU type."""

    device_name: str
    files: int
    times: np.ndarray  # bin centres, POSIX seconds
    docs_per_s: np.ndarray  # median over the files that finished in the bin


def rate_series(stats: statstable.StatsTable | None, *, bins: int = 48) -> list[RateSeries]:
    """Per-GPU-type docs/s over time: the median per time bin (most files first): 50k
    points are a grey cloud, a line per GPU type shows a step when the speed changes."""
    if stats is None or len(stats) == 0:
        return []
    ok = np.isfinite(stats.finished_at) & (stats.seconds > 0) & np.isfinite(stats.docs)
    t = stats.select(ok)
    if len(t) == 0:
        return []
    start, end = float(t.finished_at.min()), float(t.finished_at.max())
    edges = np.linspace(start, end if end > start else start + 1.0, bins + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    which = np.clip(np.searchsorted(edges, t.finished_at, side="right") - 1, 0, bins - 1)
    rate = t.docs / t.seconds
    names, counts = np.unique(t.device_name.astype(str), return_counts=True)
    out = []
    for i in np.argsort(-counts, kind="stable"):
        mine = t.device_name.astype(str) == names[i]
        medians = np.full(bins, np.nan)
        for b in np.unique(which[mine]):
            medians[b] = np.median(rate[mine & (which == b)])
        out.append(RateSeries(str(names[i]), int(counts[i]), centres, medians))
    return out


def headline(cov: coverage.Coverage) -> tuple[str, str]:
    """The two lines at the top of the picture: state, then what needs attention."""
    first = f"{cov.name}: {cov.shards_percent:.1f}% of shards done "
    first += f"({cov.shards_done:,} / {cov.shards_total:,})  ·  files {cov.files_percent:.1f}% "
    first += f"({cov.files_done:,} / {cov.files_total:,})  ·  {human_count(cov.docs_done)} docs"
    if cov.eta is not None and cov.eta.remaining > 0:
        first += f"  ·  ETA {format_duration(cov.eta.seconds)} on {cov.eta.gpus} "
        first += f"GPU{'s' if cov.eta.gpus != 1 else ''}"
    n = len(cov.skew_flagged)
    notes = ["no category skew"]
    if n:
        named = ", ".join(cov.skew_flagged[:4]) + (", ..." if n > 4 else "")
        band = f"outside the 99% band of the overall {cov.overall_percent:.1f}% (red)"
        notes = [f"{n} categor{'y' if n == 1 else 'ies'} {band}: {named}"]
    notes += [f"{cov.shards_failing:,} shards have failure records"] if cov.shards_failing else []
    if cov.files_quarantined:
        notes.append(f"{cov.files_quarantined:,} files quarantined (left out)")
    left = f"{cov.shards_remaining:,} shards left (shardwise retry-array lists them)"
    notes.append(left if cov.shards_remaining else "every shard is done")
    return first, "  ·  ".join(notes)


def _bars(ax: Any, cov: coverage.Coverage) -> None:
    """Per-category completion, least covered on top, flagged in red."""
    shown = [c for i, c in enumerate(cov.categories) if i < MAX_BARS or c.flagged]
    hidden = len(cov.categories) - len(shown)
    if not shown:
        ax.text(0.5, 0.5, "no categories", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    # At least MIN_ROWS rows tall, top-aligned: a run with three categories gets three
    # thin bars, not three slabs.
    rows = max(len(shown), MIN_ROWS)
    y = rows - 1 - np.arange(len(shown))
    pct = np.array([c.percent for c in shown])
    colours = [FLAG_COLOUR if c.flagged else OK_COLOUR for c in shown]
    ax.barh(y, np.full(len(shown), 100.0), color=TRACK_COLOUR, height=0.75)
    ax.barh(y, pct, color=colours, height=0.75)
    for yi, c in zip(y, shown, strict=True):
        ax.text(
            101.0,
            yi,
            f"{c.percent:5.1f}%  {c.tasks_done:,}/{c.tasks_total:,}",
            va="center",
            ha="left",
            fontsize=8.5,
            color=FLAG_COLOUR if c.flagged else "#333333",
        )
    ax.axvline(cov.overall_percent, color="#333333", linestyle="--", linewidth=1)
    ax.text(
        cov.overall_percent,
        rows - 0.35,
        f" overall {cov.overall_percent:.1f}%",
        fontsize=8.5,
        va="bottom",
        ha="left",
        color="#333333",
    )
    ax.set_yticks(y, [_short(c.name, 30) for c in shown], fontsize=8.5)
    for tick, c in zip(ax.get_yticklabels(), shown, strict=True):
        if c.flagged:
            tick.set_color(FLAG_COLOUR)
            tick.set_fontweight("bold")
    ax.set_xlim(0, 130)
    ax.set_xticks([0, 25, 50, 75, 100])
    ax.set_ylim(-0.6, rows + 0.4)
    ax.set_xlabel("tasks done (%)")
    title = f"Completion by category ({len(cov.categories):,}, least covered first)"
    ax.set_title(title, loc="left", fontsize=11, fontweight="bold")
    if hidden:
        low = min(c.percent for c in cov.categories[len(shown) :]) if hidden else 0
        ax.text(
            0,
            -0.08,
            f"+ {hidden:,} more categories, all at {low:.1f}% or more",
            transform=ax.transAxes,
            fontsize=8.5,
            color="#555555",
        )
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def _completion(ax: Any, series: CompletionSeries, cov: coverage.Coverage, now: float) -> None:
    """Shards done over time, with the ETA as a dashed projection from now."""
    import matplotlib.dates as mdates  # noqa: PLC0415 - ~0.4 s, pictures only

    ax.set_title("Shards done over time", loc="left", fontsize=11, fontweight="bold")
    ax.set_ylim(0, 105)
    ax.set_ylabel("shards done (%)")
    ax.axhline(100, color="#999999", linewidth=0.8)
    if series.times.size == 0:
        ax.text(
            0.5,
            0.5,
            "no dated shard markers yet",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="#555555",
        )
        ax.set_xticks([])
        return
    dates = _to_dates(series.times)
    ax.step(dates, series.percent, where="post", color=OK_COLOUR, linewidth=2)
    ax.fill_between(dates, series.percent, step="post", color=OK_COLOUR, alpha=0.12)
    ax.plot(dates[-1:], series.percent[-1:], "o", color=OK_COLOUR)
    first, last = float(series.times[0]), float(series.times[-1])
    right = last + (cov.eta.seconds if cov.eta is not None and cov.shards_remaining else 0.0)
    pad = max((right - first) * 0.04, 60.0)
    ax.set_xlim(_to_dates(np.array([first - pad, right + pad])))
    if cov.eta is not None and cov.shards_remaining and math.isfinite(cov.eta.seconds):
        # Projected from the last finished shard, not from now: a stalled run would
        # otherwise squeeze months of history into one pixel column.
        end = last + cov.eta.seconds
        ax.plot(
            _to_dates(np.array([last, end])),
            [series.percent[-1], 100.0],
            linestyle="--",
            color="#555555",
            linewidth=1.5,
        )
        ax.annotate(
            f"ETA {format_duration(cov.eta.seconds)} on {cov.eta.gpus} "
            f"GPU{'s' if cov.eta.gpus != 1 else ''}",
            xy=(_to_dates(np.array([end]))[0], 100.0),
            xytext=(-6, -16),
            textcoords="offset points",
            ha="right",
            fontsize=9,
            color="#333333",
        )
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
    ax.text(
        0.01,
        0.9,
        f"{cov.shards_done:,} / {cov.shards_total:,} ({cov.shards_percent:.1f}%)",
        transform=ax.transAxes,
        va="top",
        fontsize=10,
        fontweight="bold",
    )
    idle = now - last
    if cov.shards_remaining and idle > STALE_AFTER_S:
        ax.text(
            0.01,
            0.82,
            f"no shard finished for {format_duration(idle)}: stalled?",
            transform=ax.transAxes,
            va="top",
            fontsize=10,
            color=FLAG_COLOUR,
        )
    ax.grid(alpha=0.3)


def _rates(ax: Any, series: list[RateSeries]) -> None:
    """Median docs/s per GPU, one line per GPU type."""
    import matplotlib.dates as mdates  # noqa: PLC0415 - ~0.4 s, pictures only

    ax.set_title("Throughput per GPU (median docs/s)", loc="left", fontsize=11, fontweight="bold")
    if not series:
        ax.text(
            0.5,
            0.5,
            "no stats yet",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="#555555",
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    for i, s in enumerate(series[: len(DEVICE_COLOURS)]):
        ok = np.isfinite(s.docs_per_s)
        ax.plot(
            _to_dates(s.times[ok]),
            s.docs_per_s[ok],
            marker="o",
            markersize=3,
            linewidth=1.5,
            color=DEVICE_COLOURS[i],
            label=f"{s.device_name} ({s.files:,} files)",
        )
    ax.set_ylim(bottom=0)
    ax.set_ylabel("docs/s per GPU")
    ax.legend(loc="lower left", fontsize=8.5, frameon=False)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
    ax.grid(alpha=0.3)


def _to_dates(seconds: np.ndarray) -> np.ndarray:
    """POSIX seconds -> numpy datetimes (matplotlib plots them natively, in UTC)."""
    return (np.asarray(seconds) * 1e6).astype("int64").astype("datetime64[us]")


def render_png(
    state: coverage_state.RunState, cov: coverage.Coverage, *, now: float | None = None
) -> bytes:
    """The 1600 x 1000 px picture as PNG bytes (``now`` anchors the ETA projection)."""
    fig = picture.figure(FIGSIZE)
    grid = fig.add_gridspec(
        2,
        2,
        left=0.17,
        right=0.97,
        top=0.87,
        bottom=0.07,
        wspace=0.28,
        hspace=0.32,
        width_ratios=(1.0, 1.15),
    )
    first, second = headline(cov)
    fig.text(0.02, 0.965, first, fontsize=15, fontweight="bold", va="top")
    fig.text(
        0.02,
        0.925,
        second,
        fontsize=11,
        va="top",
        color=FLAG_COLOUR if cov.skew_flagged or cov.shards_failing else "#333333",
    )
    _bars(fig.add_subplot(grid[:, 0]), cov)
    _completion(
        fig.add_subplot(grid[0, 1]),
        completion_series(state),
        cov,
        time.time() if now is None else now,
    )
    _rates(fig.add_subplot(grid[1, 1]), rate_series(state.stats))
    return picture.png(fig)
