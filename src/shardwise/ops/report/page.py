"""``shardwise report``: one picture (PNG, ``picture.py``) and a self-contained HTML page
of a run that embeds it with the full tables.
"""

import base64
import html
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage import read as coverage_state
from shardwise.ops.coverage.render import summary_lines
from shardwise.ops.domains.plot import report_figure
from shardwise.ops.report import figure


def _rates_html(cov: coverage.Coverage) -> str:
    """The throughput table per GPU type (empty before any stats)."""
    e = html.escape
    rows = ""
    for d in cov.throughput.devices if cov.throughput is not None else ():
        docs = d.docs_per_s
        cells = "<td></td><td></td><td></td>"
        if docs:
            cells = f"<td>{docs.p10:,.0f}</td><td>{docs.median:,.0f}</td><td>{docs.p90:,.0f}</td>"
        rows += f"<tr><td>{e(d.device_name)}</td><td>{d.files:,}</td>{cells}"
        rows += f"<td>{d.files_per_hour:,.1f}</td></tr>\n"
    if not rows:
        return ""
    text = "<h2>Throughput per GPU type</h2><table><tr><th>GPU</th><th>files</th>"
    text += "<th>docs/s p10</th><th>median</th><th>p90</th><th>files/h per GPU</th></tr>"
    return text + f"{rows}</table>"


def _quarantine_html(cov: coverage.Coverage) -> str:
    """The quarantined files with their reasons (empty when there are none)."""
    if not cov.quarantined:
        return ""
    e = html.escape
    rows = "\n".join(
        f"<tr><td>{e(q.file)}</td><td>{e(q.reason)}</td><td>{e(q.at)}</td><td>{e(q.by)}</td></tr>"
        for q in cov.quarantined
    )
    text = f"<h2>Quarantined files ({len(cov.quarantined):,})</h2>"
    text += "<p>Left out of this run on purpose: not labelled, not failed, not left to do "
    text += "(<code>shardwise quarantine --list</code>).</p>"
    text += f"<table><tr><th>file</th><th>reason</th><th>at</th><th>by</th></tr>{rows}</table>"
    return text


def render_html(
    cov: coverage.Coverage, png: bytes, domains: tuple[bytes, str] | None = None
) -> str:
    """A self-contained page: the picture (inline), the summary and the full tables, and
    with ``domains`` (picture, table) the domain distribution."""
    e = html.escape
    domains_html = ""
    if domains is not None:
        inline = base64.b64encode(domains[0]).decode("ascii")
        domains_html = "<h2>Domain distribution</h2><img alt='domain distribution' "
        domains_html += f"src='data:image/png;base64,{inline}'><pre>{e(domains[1])}</pre>"
    first, second = figure.headline(cov)
    rows = "\n".join(
        f"<tr class='{'flag' if c.flagged else ''}'><td>{e(c.name)}</td>"
        f"<td>{c.tasks_done:,}</td><td>{c.tasks_total:,}</td><td>{c.percent:.1f}%</td>"
        f"<td>{'skew' if c.flagged else ''}</td></tr>"
        for c in cov.categories
    )
    encoded = base64.b64encode(png).decode("ascii")
    page = resources.files("shardwise").joinpath("data/report.html").read_text("utf-8")
    return string.Template(page).substitute(
        name=e(cov.name),
        note_colour=figure.FLAG_COLOUR if cov.skew_flagged else "#444",
        flag_colour=figure.FLAG_COLOUR,
        first=e(first),
        second=e(second),
        png=encoded,
        summary=e("\n".join(summary_lines(cov))),
        rates=_rates_html(cov),
        quarantine=_quarantine_html(cov),
        categories=f"{len(cov.categories):,}",
        rows=rows,
        domains=domains_html,
        remaining=f"{cov.shards_remaining:,}",
        incomplete=e(cov.incomplete_shards) or "none",
        run_dir=e(cov.run_dir),
    )


def write_report(
    state: coverage_state.RunState,
    cov: coverage.Coverage,
    out_html: Path,
    *,
    out_png: Path | None = None,
    now: float | None = None,
    domains_png: Path | None = None,
) -> tuple[Path, Path]:
    """Write the PNG (default: beside the HTML) and the HTML, with the domain distribution
    when some shard has label counts (``domains_png``: its picture too, or a placeholder)."""
    out_html = Path(out_html)
    out_png = Path(out_png) if out_png is not None else out_html.with_suffix(".png")
    png = figure.render_png(state, cov, now=now)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    out_png.write_bytes(png)
    domains_png_bytes, domains_table, found = report_figure(state.run_dir)
    if domains_png is not None:
        Path(domains_png).parent.mkdir(parents=True, exist_ok=True)
        Path(domains_png).write_bytes(domains_png_bytes)
    domains = (domains_png_bytes, domains_table) if found else None
    out_html.write_text(render_html(cov, png, domains), encoding="utf-8")
    return out_html, out_png


@dataclass(frozen=True)
class Written:
    """``shardwise report``: the files written and the coverage they show."""

    html: Path
    png: Path
    coverage: coverage.Coverage

    @property
    def incomplete(self) -> bool:
        """A planned task is neither labelled nor quarantined, or a shard is not done."""
        return bool(self.coverage.tasks_left or self.coverage.shards_remaining)


def write(
    run_dir: Path,
    out_html: Path,
    *,
    out_png: Path | None = None,
    domains_png: Path | None = None,
    category_regex: str | None = None,
    gpus: int | None = None,
) -> Written:
    """Load the run, compute its coverage and write the report (see :func:`write_report`)."""
    state = coverage.load_state(run_dir)
    cov = coverage.compute(state, category_regex=category_regex, gpus=gpus)
    html, png = write_report(state, cov, out_html, out_png=out_png, domains_png=domains_png)
    return Written(html, png, cov)
