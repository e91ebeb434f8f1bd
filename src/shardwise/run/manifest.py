"""Source tasks: which files of the corpus are work, and their ids.

A task is one file, or ``files_per_task`` consecutive sorted files; its id is the path
relative to the input root (a group's joined by ``|``), so the assignment does not depend
on the mount or bucket. Names that could escape the output prefix are refused at plan time.
"""

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
    parts = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
    tokens = re.split(r"(\*\*/|\*\*|\*|\?)", pattern)
    return re.compile("".join(parts.get(t, re.escape(t)) for t in tokens) + r"\Z")


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The corpus's source files, and what else the listing held (nothing is dropped
    without a word): ``hidden`` (``.`` or ``_`` names), ``outputs`` (shardwise's own),
    ``unsafe`` (with why; left out only when the config says so), ``other`` (``input.glob``
    matches not of ``input.format``, which coverage reports too)."""

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
    ``output_prefix``: where the output root lies inside the input root (``""``, a folder,
    or None: elsewhere): a name like an output is one only there. ``other_roots`` (the Dolma
    attributes) hold only outputs. Unsafe names are refused unless ``skip_unsafe``."""
    rx = _glob_regex(glob)
    chosen: list[tuple[str, int]] = []
    hidden, own, other = [], [], []
    unsafe: list[tuple[str, str]] = []
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
    return Selection(files=chosen, hidden=hidden, outputs=own, unsafe=unsafe, other=other)


def unsafe_names_message(unsafe: list[tuple[str, str]], limit: int = 20) -> str:
    """The refusal for unsafe input names: each name with its reason, then the fix."""
    lines = [f"{len(unsafe)} input file name(s) cannot be used safely in an output path:"]
    lines += [f"  {rel!r}: {reason}" for rel, reason in unsafe[:limit]]
    if len(unsafe) > limit:
        lines.append(f"  ... and {len(unsafe) - limit} more")
    text = "Rename them, narrow input.glob to leave them out, or set "
    text += "input.skip_unsafe_names: true to plan without them (they are then listed on "
    text += "every dry run and never labelled)."
    lines.append(text)
    return "\n".join(lines)


def build_tasks(files: list[str], files_per_task: int = 1) -> list[Task]:
    """Group sorted files into tasks of ``files_per_task`` consecutive files."""
    files = sorted(files)
    groups = (files[i : i + files_per_task] for i in range(0, len(files), files_per_task))
    return [Task("|".join(group), tuple(group)) for group in groups]


@cache
def _category_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def category_of(path: str, pattern: str) -> str:
    """The category of a task path: first capture group, else whole match, else its folder."""
    m = _category_regex(pattern).search(path)
    if m:
        return m.group(1) if m.groups() and m.group(1) is not None else m.group(0)
    return path.rsplit("/", 1)[0] if "/" in path else "(root)"
