"""Source tasks: which files of the corpus are work, and their ids.

A task is one file, or ``files_per_task`` consecutive files in sorted order; its id
is the file's path relative to the input root (for a group, the paths joined by
``|``). Relative ids make the assignment independent of the mount or bucket the
corpus lives in. Paths that could escape the output prefix are refused here, at
plan time, before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from shardwise.errors import InputError
from shardwise.run import outputs
from shardwise.run.reader import file_format
from shardwise.run.runjson import RUN_JSON

#: Why a relative path cannot be used safely as part of an output path, first match wins.
_UNSAFE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^/"), "it is an absolute path"),
    (re.compile(r"(^|/)\.\.?(/|$)"), "a '.' or '..' component could escape the output prefix"),
    (re.compile(r"\\"), "a backslash is a path separator for Windows tools and some stores"),
    (re.compile(r"://"), "it looks like a URL"),
    (re.compile(r"[\x00-\x1f\x7f]"), "it holds control characters"),
)


@dataclass(frozen=True)
class Task:
    """One unit of work: its id and the files it covers."""

    task_id: str
    files: tuple[str, ...]


def unsafe_reason(rel: str) -> str | None:
    """Why ``rel`` cannot be used as part of an output path, or None when it can."""
    if not rel:
        return "it is empty"
    for pattern, reason in _UNSAFE:
        if pattern.search(rel):
            return reason
    return None


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


@dataclass(frozen=True)
class Selection:
    """The corpus's source files, and what the listing held that is not one (with why).

    Nothing is dropped without a word: ``hidden`` (names starting with ``.`` or ``_``,
    temp files and markers of other tools), ``outputs`` (shardwise's own outputs under
    the output root), ``unsafe`` (names that cannot be used in an output path, left
    out only when the config says so) and ``other`` (files ``input.glob`` matches that
    are not of ``input.format``: an unknown suffix, or the other format) are reported
    by the planner; ``other`` also by coverage (``run/skipped.py``).
    """

    files: list[tuple[str, int]]
    hidden: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    unsafe: list[tuple[str, str]] = field(default_factory=list)  # (name, reason)
    other: list[str] = field(default_factory=list)


def select_files(
    listing: list[tuple[str, int]],
    *,
    glob: str = "**/*",
    fmt: str = "auto",
    output_prefix: str | None = None,
    other_roots: tuple[str, ...] = (),
    skip_unsafe: bool = False,
) -> Selection:
    """The listing's source files: matching ``glob`` and ``fmt``, not hidden, not outputs.

    ``output_prefix`` is where the output root lies inside the input root (``""``: the
    same root, ``"labels/"``: a folder of it, None: elsewhere); a file named like one of
    shardwise's outputs is skipped only there, and is a normal input anywhere else.
    ``other_roots`` are where the run's other roots (the Dolma attributes) lie inside the
    input root: everything there is an output.
    Names that cannot be used safely raise InputError listing every one with its reason
    and the fix, unless ``skip_unsafe`` (``input.skip_unsafe_names``) leaves them out.
    """
    rx = _glob_regex(glob)
    chosen: list[tuple[str, int]] = []
    hidden: list[str] = []
    own: list[str] = []
    unsafe: list[tuple[str, str]] = []
    other: list[str] = []
    for rel, size in listing:
        name = rel.rsplit("/", 1)[-1]
        if name.startswith((".", "_")):
            hidden.append(rel)
            continue
        if (
            output_prefix is not None
            and rel.startswith(output_prefix)
            and (outputs.kind_of(rel) is not None or rel == output_prefix + RUN_JSON)
        ) or rel.startswith(other_roots):
            own.append(rel)
            continue
        if not rx.match(rel):
            continue  # left out by the config's own glob
        kind = file_format(rel)
        if kind is None or fmt not in ("auto", kind):
            other.append(rel)
            continue
        reason = unsafe_reason(rel)
        if reason is not None:
            unsafe.append((rel, reason))
            continue
        chosen.append((rel, size))
    if unsafe and not skip_unsafe:
        raise InputError(unsafe_names_message(unsafe))
    chosen.sort()
    return Selection(chosen, hidden, own, unsafe, other)


def unsafe_names_message(unsafe: list[tuple[str, str]], limit: int = 20) -> str:
    """The refusal for unsafe input names: each name with its reason, then the fix."""
    lines = [f"{len(unsafe)} input file name(s) cannot be used safely in an output path:"]
    lines += [f"  {rel!r}: {reason}" for rel, reason in unsafe[:limit]]
    if len(unsafe) > limit:
        lines.append(f"  ... and {len(unsafe) - limit} more")
    lines.append(
        "Rename them, narrow input.glob to leave them out, or set "
        "input.skip_unsafe_names: true to plan without them (they are then listed on "
        "every dry run and never labelled)."
    )
    return "\n".join(lines)


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
