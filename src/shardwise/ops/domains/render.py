"""The domain distribution as text: a table for terminals, Markdown, CSV, the JSON document
and WebOrganizer's ``domain_statistics``, and the dry run's one-line headline.

Pure functions of a :class:`~shardwise.ops.domains.compute.Domains` (the headline reads
the run through :func:`~shardwise.ops.domains.compute.load`); the estimate itself is
``ops/domains/compute.py``.
"""

import csv
import io
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.errors import DomainsError, ShardwiseError
from shardwise.ops.common.text import human_bytes, human_count
from shardwise.ops.domains.compute import TIMES, Domains, compute, load, weborganizer_ids

#: Rows a table shows per view unless ``--top`` says otherwise (csv and json show all).
DEFAULT_TOP = 30


def _unit(weight: str) -> str:
    return {"docs": "docs", "bytes": "text bytes"}.get(weight, "tokens")


def _amount(x: float, weight: str) -> str:
    return human_bytes(x) if weight == "bytes" else human_count(x)


def status_line(d: Domains) -> str:
    """``estimated from N of M tasks (p% done), 95% CI +-x`` or ``exact``."""
    e = d.est
    if e.exact:
        return f"exact: all {e.tasks_total:,} tasks labelled"
    text = f"estimated from {e.tasks_labelled:,} of {e.tasks_total:,} tasks "
    return text + f"({d.percent_done:.1f}% done), 95% CI ±{100 * e.half_width:.1f} points at most"


def summary_lines(d: Domains) -> list[str]:
    """The header lines shared by table and markdown."""
    e = d.est
    axes = TIMES.join(d.axes)
    total = f"{_amount(e.corpus_total, d.weight)} {_unit(d.weight)}"
    if not e.exact and math.isfinite(e.corpus_high):
        total += f" (95% CI {_amount(e.corpus_low, d.weight)} - {_amount(e.corpus_high, d.weight)})"
    elif not e.exact:
        n = len(e.uncovered)
        total += f" (95% CI at least {_amount(e.corpus_low, d.weight)}; no upper bound while "
        total += f"{n:,} categor{'y has' if n == 1 else 'ies have'} no labelled task)"
    lines = [
        f"{axes}: share of {_unit(d.weight)}, {status_line(d)}",
        f"shards   {d.data.shards_done:,} / {d.data.total_shards:,} done",
        f"corpus   {total}",
    ]
    unseen = int((~(np.nan_to_num(e.share) > 0)).sum())
    if unseen and not e.exact and e.tasks_labelled:
        text = f"unseen   {unseen:,} of the {e.share.size:,} {TIMES.join(d.axes)} cells are in no "
        lines.append(text + f"labelled task: each is below {_pct(e.unseen_upper)} (95%)")
    return lines + [f"note     {n}" for n in d.notes]


def _order(d: Domains, share: np.ndarray) -> np.ndarray:
    s = np.nan_to_num(share, nan=-1.0)
    return np.lexsort((np.arange(s.size), -s))


def _pct(x: float) -> str:
    return "    n/a" if not math.isfinite(x) else f"{100 * x:.2f}%"


def _rows(
    d: Domains, share: np.ndarray, low: np.ndarray, high: np.ndarray, total: np.ndarray
) -> list[list[str]]:
    return [
        [
            *d.cell_labels[c],
            _pct(share[c]),
            f"{_pct(low[c])} - {_pct(high[c])}",
            _amount(float(total[c]), d.weight),
        ]
        for c in _order(d, share).tolist()
        if share[c] > 0
    ]


def _sections(d: Domains, by_category: bool) -> list[tuple[str, list[list[str]]]]:
    e = d.est
    if not by_category:
        return [("", _rows(d, e.share, e.low, e.high, e.total))]
    b = e.by_category
    out = []
    weight = np.nan_to_num(b.estimated_total, nan=-1.0)
    for h in np.argsort(-weight, kind="stable").tolist():
        name = d.data.categories[h]
        if b.tasks_labelled[h] == 0:
            out.append((f"{name}: no labelled task yet ({b.tasks_total[h]:,} tasks)", []))
            continue
        head = f"{name}: {b.tasks_labelled[h]:,} of {b.tasks_total[h]:,} tasks, "
        head += f"~{_amount(float(b.estimated_total[h]), d.weight)} {_unit(d.weight)}"
        out.append((head, _rows(d, b.share[h], b.low[h], b.high[h], b.total[h])))
    return out


def _header(d: Domains) -> list[str]:
    return [*d.axes, "share", "95% CI", f"est. {_unit(d.weight)}"]


def format_table(d: Domains, *, by_category: bool = False, top: int | None = None) -> str:
    """Aligned plain text, sorted by share (the ``top`` rows of each section)."""
    limit = top if top is not None else (DEFAULT_TOP if len(d.axes) > 1 else None)
    lines = [*summary_lines(d), ""]
    for title, rows in _sections(d, by_category):
        if title:
            lines.append(title)
        shown = rows if limit is None else rows[:limit]
        table = [_header(d), *shown]
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        n_text = len(d.axes)
        for r in table:
            pairs = enumerate(zip(r, widths, strict=True))
            cells = [c.ljust(w) if i < n_text else c.rjust(w) for i, (c, w) in pairs]
            lines.append("  ".join(cells).rstrip())
        if len(rows) > len(shown):
            lines.append(f"... {len(rows) - len(shown):,} more (--top N, or --format csv)")
        lines.append("")
    return "\n".join(lines).rstrip()


def format_markdown(d: Domains, *, by_category: bool = False, top: int | None = None) -> str:
    """GitHub-flavoured Markdown tables."""
    limit = top if top is not None else (DEFAULT_TOP if len(d.axes) > 1 else None)
    out = [f"### Domains of run `{d.data.name}`", "", "```", *summary_lines(d), "```", ""]
    head = _header(d)
    for title, rows in _sections(d, by_category):
        if title:
            out += [f"**{title}**", ""]
        if not rows:
            continue
        shown = rows if limit is None else rows[:limit]
        out.append("| " + " | ".join(head) + " |")
        out.append("| " + " | ".join(["---"] * len(d.axes) + ["---:"] * 3) + " |")
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in shown]
        if len(rows) > len(shown):
            out.append(f"\n_{len(rows) - len(shown):,} more rows_")
        out.append("")
    return "\n".join(out).rstrip()


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _cell_dicts(
    d: Domains, share: np.ndarray, low: np.ndarray, high: np.ndarray, total: np.ndarray
) -> list[dict[str, Any]]:
    return [
        {
            "labels": dict(zip(d.axes, d.cell_labels[c], strict=True)),
            "share": _num(share[c]),
            "low": _num(low[c]),
            "high": _num(high[c]),
            "total": _num(total[c]),
        }
        for c in _order(d, share).tolist()
        if share[c] > 0
    ]


def to_dict(d: Domains, *, by_category: bool = False) -> dict[str, Any]:
    """The JSON document (format_version 1; schema in docs/domains.md)."""
    e = d.est
    corpus = {
        "estimate": _num(e.corpus_total),
        "low": _num(e.corpus_low),
        "high": _num(e.corpus_high),
    }
    out: dict[str, Any] = {
        "format_version": 1,
        "run": d.data.name,
        "run_dir": str(d.data.run_dir),
        "view": d.view,
        "axes": list(d.axes),
        "weight": d.weight,
        "exact": e.exact,
        "tasks_total": e.tasks_total,
        "tasks_labelled": e.tasks_labelled,
        "percent_done": round(d.percent_done, 3),
        "shards_total": d.data.total_shards,
        "shards_done": d.data.shards_done,
        "corpus_total": corpus,
        "uncovered_categories": e.uncovered,
        "uncovered_weight": e.uncovered_weight,
        "quarantined_tasks": d.data.quarantined_tasks,
        "unseen_cells": int((~(np.nan_to_num(e.share) > 0)).sum()),
        "unseen_upper": e.unseen_upper,
        "notes": d.notes,
        "cells": _cell_dicts(d, e.share, e.low, e.high, e.total),
    }
    if by_category:
        b = e.by_category
        out["categories"] = {
            name: {
                "tasks_total": int(b.tasks_total[h]),
                "tasks_labelled": int(b.tasks_labelled[h]),
                "estimated_total": _num(float(b.estimated_total[h])),
                "cells": _cell_dicts(d, b.share[h], b.low[h], b.high[h], b.total[h])
                if b.tasks_labelled[h]
                else [],
            }
            for h, name in enumerate(d.data.categories)
        }
    return out


def format_csv(d: Domains, *, by_category: bool = False, top: int | None = None) -> str:
    """One row per (category,) cell: labels, share, low, high, total (every cell)."""
    del top
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    head = ["category"] if by_category else []
    writer.writerow([*head, *d.axes, "share", "low", "high", "total"])
    doc = to_dict(d, by_category=by_category)
    groups = [(None, doc["cells"])]
    if by_category:
        groups = [(name, c["cells"]) for name, c in doc["categories"].items()]
    for name, cells in groups:
        for cell in cells:
            writer.writerow(
                [
                    *([name] if by_category else []),
                    *cell["labels"].values(),
                    *(
                        ("" if cell[k] is None else repr(cell[k]))
                        for k in ("share", "low", "high", "total")
                    ),
                ]
            )
    return buf.getvalue().rstrip("\n")


#: What ``shardwise domains --format`` takes (json: :func:`to_dict`).
FORMATS = ("table", "json", "csv", "markdown", "weborganizer")


def headline(run_dir: Path, top: int = 3) -> str | None:
    """One line for the dry-run printout: the largest labels so far of the first pair's
    two classifiers (else the first two); None when no shard has a summary yet."""
    try:
        data = load(run_dir)
    except (ShardwiseError, OSError):
        return None
    views = data.views()
    if not views:
        return None
    pairs = data.pairs()
    names = pairs[0].split(",") if pairs else [v for v in views if "," not in v][:2]
    parts = []
    done = ""
    for name in names:
        d = compute(data, classifier=name)
        order = _order(d, d.est.share)[:top]
        labels = ", ".join(f"{d.cell_labels[c][0]} {100 * d.est.share[c]:.1f}%" for c in order)
        parts.append(f"{name}: {labels}")
        done = "exact" if d.est.exact else f"estimated, {d.percent_done:.1f}% of tasks labelled"
    return f"domains  {'  ·  '.join(parts)}  ({done}; shardwise domains)"


def _ids_of_axis(d: Domains, axis: int) -> dict[str, int]:
    """The WebOrganizer ids of one axis's labels; DomainsError when they are not
    WebOrganizer's (its selection script indexes domains by those ids)."""
    seen = set(d.labels[axis])
    for ids in weborganizer_ids().values():
        if seen <= set(ids):
            return ids
    extra = sorted(seen - set(weborganizer_ids()["topic"]))[:3]
    msg = f"--format weborganizer: classifier {d.axes[axis]!r} has labels that are neither "
    msg += f"WebOrganizer's topics nor its formats (e.g. {extra}); its domain ids would mean "
    msg += "nothing to domain_statistics.py and select_training_data.py. Use --format json"
    raise DomainsError(msg)


def to_weborganizer(d: Domains) -> list[dict[str, Any]]:
    """WebOrganizer's ``domain_statistics`` list, one entry per domain seen, sorted by
    domain: ``{"domain": id or [topic id, format id], "tokens", "documents", "weight"}``
    (the share of what ``--weight`` says); before completion with its 95% interval."""
    ids = [_ids_of_axis(d, axis) for axis in range(len(d.axes))]
    e = d.est
    docs = _totals(d, "docs") if d.weight != "bytes" else {}
    out = []
    for c in np.flatnonzero(np.nan_to_num(e.share) > 0).tolist():
        domain = [ids[axis][name] for axis, name in enumerate(d.cell_labels[c])]
        entry: dict[str, Any] = {
            "domain": domain[0] if len(domain) == 1 else domain,
            "labels": list(d.cell_labels[c]),
            "tokens": round(float(e.total[c])) if d.weight == "tokens" else None,
            "documents": docs.get(d.cell_labels[c]),
            "weight": float(e.share[c]),
        }
        if not e.exact:
            entry.update(estimated=True, weight_low=float(e.low[c]), weight_high=float(e.high[c]))
        out.append(entry)
    return sorted(out, key=lambda x: x["domain"] if len(d.axes) > 1 else [x["domain"]])


def _totals(d: Domains, weight: str) -> dict[tuple[str, ...], int]:
    """Each cell's estimated total in another weight (the same view), by its labels."""
    is_pair = "," in d.view
    other = (
        d
        if d.weight == weight
        else compute(
            d.data,
            pair=d.view if is_pair else None,
            classifier=None if is_pair else d.view,
            weight=weight,
        )
    )
    return {
        labels: round(float(t))
        for labels, t in zip(other.cell_labels, other.est.total, strict=True)
    }


def format_weborganizer(d: Domains, *, by_category: bool = False, top: int | None = None) -> str:
    """:func:`to_weborganizer` as JSON text (a list, as ``domain_statistics.py`` writes)."""
    if by_category:
        raise DomainsError("--format weborganizer writes the corpus's domains: drop --by category")
    del top
    return json.dumps(to_weborganizer(d), indent=2)


FORMATTERS: dict[str, Callable[..., str]] = {
    "table": format_table, "csv": format_csv, "markdown": format_markdown,
    "weborganizer": format_weborganizer,
}  # fmt: skip
