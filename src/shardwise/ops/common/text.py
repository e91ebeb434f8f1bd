"""Numbers, sizes and durations for people: one set of formatters for every view."""

import difflib
import math
from collections.abc import Iterable

from shardwise.run import freshness


def human_bytes(n: float) -> str:
    """Decimal units, as storage quotas are quoted: ``1.21 TB``."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} PB"  # pragma: no cover


def human_count(n: float) -> str:
    """``12,345`` below a million, ``12.3 M`` / ``4.56 B`` above, ``1,000 B`` from a
    trillion on (budgets are said in billions: ``1000.00 B`` reads as a typo)."""
    if n < 1e6:
        return f"{n:,.0f}"
    if n < 1e9:
        return f"{n / 1e6:.2f} M"
    if n < 1e12:
        return f"{n / 1e9:.2f} B"
    return f"{n / 1e9:,.0f} B"


def format_duration(seconds: float) -> str:
    """Short human duration: ``45s``, ``12m``, ``5h 12m``, ``3d 4h``."""
    if not math.isfinite(seconds):
        return "unknown"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    minutes = s // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def near_labels(label: str, known: Iterable[str]) -> str:
    """``; did you mean 'A', 'B'?`` for up to three of ``known`` close to ``label`` (case
    folded: labels often differ in case only), else ""."""
    folded = {k.lower(): k for k in sorted(known)}
    near = [folded[k] for k in difflib.get_close_matches(label.lower(), folded, n=3)]
    return f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""


#: Files a line names before it counts the rest (as a stale selection's line does).
SHOWN_FILES = freshness.SHOWN


def left_out_line(left_out: dict[str, str], run_dir: str, then: str) -> str:
    """The files a view took nothing from because their labels are not the run's (no
    marker, or ``verify`` rejects them: another model or set-up than run.json pins), the
    first one's reason, and the way out (``then``: what follows the repair and the run):
    ``select`` and ``domains`` say it alike."""
    files = sorted(left_out)
    more = len(files) - SHOWN_FILES
    shown = ", ".join(files[:SHOWN_FILES]) + (f", and {more:,} more" if more > 0 else "")
    text = f"{len(files):,} file(s) left out, as their labels are not the run's ({shown}; "
    text += f"{files[0]}: {left_out[files[0]]}): `shardwise verify --run-dir {run_dir} --repair`"
    return text + f", run the workflow again, then {then}"
