"""The progress journal: ``<run_dir>/progress/<shard>.jsonl``, one line per finished file.

Appended after each file's marker (``{file, rows, label_counts, stats}``): a retry skips
what it lists (on object stores without asking for each marker), and the shard's summary
is built from it without reading the output back. A torn line is ignored; the last wins.
"""

import json
import re
from pathlib import Path
from typing import Any

from shardwise.store.atomic import write_atomic

PROGRESS_DIR = "progress"


def journal_path(run_dir: Path, shard: int) -> Path:
    """``<run_dir>/progress/<shard>.jsonl``."""
    return Path(run_dir) / PROGRESS_DIR / f"{shard}.jsonl"


def shards(run_dir: Path) -> list[int]:
    """The shards that have a journal (one directory listing), ascending."""
    try:
        names = [p.name for p in (Path(run_dir) / PROGRESS_DIR).iterdir()]
    except FileNotFoundError:
        return []
    return sorted(int(n[: -len(".jsonl")]) for n in names if re.fullmatch(r"-?\d+\.jsonl", n))


def append(
    run_dir: Path, shard: int, rel: str, rows: int, extra: dict[str, Any] | None = None
) -> None:
    """Append a finished file (after its marker), with ``extra``: its label counts and
    figures, for the shard's summary."""
    path = journal_path(run_dir, shard)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({**(extra or {}), "file": rel, "rows": rows}) + "\n")


def entries(run_dir: Path, shard: int) -> dict[str, dict[str, Any]]:
    """Files of the shard's journal with what each line recorded (last wins)."""
    out: dict[str, dict[str, Any]] = {}
    try:
        lines = journal_path(run_dir, shard).read_text("utf-8").splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        entry = _parse(line)
        if entry is not None:
            out[str(entry["file"])] = entry
    return out


def rows_done(run_dir: Path, shard: int) -> dict[str, int]:
    """Files this shard's earlier attempts finished (file -> rows)."""
    out: dict[str, int] = {}
    for rel, entry in entries(run_dir, shard).items():
        try:
            out[rel] = int(entry["rows"])
        except (KeyError, TypeError, ValueError):
            continue
    return out


def forget(run_dir: Path, shard: int, files: set[str]) -> None:
    """Drop ``files`` from the shard's journal (after a repair removed their markers)."""
    path = journal_path(run_dir, shard)
    if not path.exists():
        return
    lines = path.read_text("utf-8").splitlines()
    kept = [ln for ln in lines if (entry := _parse(ln)) is None or str(entry["file"]) not in files]
    write_atomic(path, "".join(f"{line}\n" for line in kept).encode("utf-8"))


def _parse(line: str) -> dict[str, Any] | None:
    """One journal line, or None for a torn or foreign one."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or "file" not in entry:
        return None
    return entry
