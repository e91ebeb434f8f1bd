"""Every link of the README and of ``docs/`` leads somewhere: the file exists, and a
``#anchor`` names a heading of it (GitHub's slugs), so a page that moved breaks no link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (fenced blocks skipped; repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    fence = False
    for line in page.read_text("utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            base = slug(line.lstrip("#"))
            n = seen.get(base, 0)
            seen[base] = n + 1
            seen.setdefault(f"{base}-{n}" if n else base, 1)
    return set(seen)


def broken(page: Path) -> list[str]:
    """The links of ``page`` that lead nowhere, each with why."""
    out: list[str] = []
    fence = False
    for line in page.read_text("utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for target in _LINK.findall(line):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                out.append(f"{target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                out.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_leads_to_a_file_and_a_heading(page):
    assert broken(page) == []


def test_the_readme_is_a_front_page():
    """What shardwise is, the two commands, a tour, where to read on: 300 lines at most."""
    text = (REPO / "README.md").read_text("utf-8")
    assert len(text.splitlines()) <= 300
    assert text.splitlines()[2] == "```bash" and "scripts/demo.sh" in text.splitlines()[3]
    linked = set(re.findall(r"\(docs/([\w.-]+\.md)", text))
    assert {p.name for p in PAGES[1:]} <= linked, "every page of docs/ is on the front page's map"
