"""Source tasks: which files of the corpus are work, and their ids.

A task is one file, or ``files_per_task`` consecutive files in sorted order; its id
is the file's path relative to the input root (for a group, the paths joined by
``|``). Relative ids make the assignment independent of the mount or bucket the
corpus lives in. Paths that could escape the output prefix are refused here, at
plan time, before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from shardwise.errors import InputError

#: File types shardwise reads, longest suffix first.
SUFFIXES: dict[str, str] = {
    ".jsonl.zst": "jsonl",
    ".jsonl.gz": "jsonl",
    ".jsonl": "jsonl",
    ".parquet": "parquet",
}

#: Outputs shardwise writes; never taken as inputs (input and output may share a root).
OUTPUT_SUFFIXES = (".labels.parquet", ".stats.json", ".done")

_BAD_PATH = re.compile(r"(^|/)\.\.?(/|$)|\\|^/|://|[\x00-\x1f]")


@dataclass(frozen=True)
class Task:
    """One unit of work: its id and the files it covers."""

    task_id: str
    files: tuple[str, ...]


def file_format(rel: str) -> str | None:
    """``parquet`` or ``jsonl`` from the file name, None for anything else."""
    for suffix, fmt in SUFFIXES.items():
        if rel.endswith(suffix):
            return fmt
    return None


def check_relative(rel: str) -> str:
    """Refuse paths that are absolute, contain ``.``/``..`` parts, schemes or control bytes."""
    if not rel or _BAD_PATH.search(rel):
        msg = f"refusing input path {rel!r}: it could escape the output prefix"
        raise InputError(msg)
    return rel


@cache
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a path glob where ``**/`` spans folders and ``*`` stays within one."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def select_files(
    listing: list[tuple[str, int]], *, glob: str = "**/*", fmt: str = "auto"
) -> list[tuple[str, int]]:
    """The listing's source files: matching ``glob`` and ``fmt``, not hidden, not outputs."""
    rx = _glob_regex(glob)
    chosen = []
    for rel, size in listing:
        name = rel.rsplit("/", 1)[-1]
        if name.startswith((".", "_")) or rel.endswith(OUTPUT_SUFFIXES):
            continue
        kind = file_format(rel)
        if kind is None or fmt not in ("auto", kind) or not rx.match(rel):
            continue
        chosen.append((check_relative(rel), size))
    chosen.sort()
    return chosen


def build_tasks(files: list[str], files_per_task: int = 1) -> list[Task]:
    """Group sorted files into tasks of ``files_per_task`` consecutive files."""
    files = sorted(files)
    return [
        Task("|".join(group), tuple(group))
        for group in (files[i : i + files_per_task] for i in range(0, len(files), files_per_task))
    ]


@cache
def _category_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def category_of(path: str, pattern: str) -> str:
    """The category of a task path: first capture group, else whole match, else its folder."""
    m = _category_regex(pattern).search(path)
    if m:
        return m.group(1) if m.groups() and m.group(1) is not None else m.group(0)
    return path.rsplit("/", 1)[0] if "/" in path else "(root)"
