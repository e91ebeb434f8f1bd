"""An append-only log of records, one JSON line each (``job-events.jsonl``,
``launch/chain.jsonl``): a line is written whole by one ``write``, and a reader skips a
torn one (a writer killed mid-line), so several processes may append to one log."""

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from shardwise.errors import RecordError

T = TypeVar("T")


def append(path: Path, line: str) -> None:
    """Add one record's line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def read(path: Path, parse: Callable[[str, str], T]) -> list[T]:
    """Every readable record, oldest first (none when the log is absent); ``parse`` gets
    the line and where it is, and raises RecordError for a torn or foreign one."""
    try:
        lines = path.read_text("utf-8").splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(parse(line, f"{path} line {i + 1}"))
        except RecordError:
            continue
    return out
