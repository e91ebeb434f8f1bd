"""The progress journal: ``<run_dir>/progress/<shard>.jsonl``, one line per finished file.

Appended after each file's marker (:class:`Line`): a retry skips
what it lists (on object stores without asking for each marker), and the shard's summary
is built from it without reading the output back. A torn line is ignored; the last wins.
"""

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

from shardwise.errors import RecordError
from shardwise.run.filestats import FIGURES, FileStats
from shardwise.run.labelcounts import LabelCounts
from shardwise.run.record import Fields
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


@dataclass(frozen=True)
class Line:
    """One journal line: a finished file, its rows, and what the shard's summary and
    marker keep of its stats (its figures and label counts; None on older lines)."""

    file: str
    rows: int
    stats: dict[str, Any] | None = None  # the file's figures (filestats.FIGURES)
    label_counts: LabelCounts | None = None

    @classmethod
    def of(cls, rel: str, rows: int, stats: FileStats) -> Self:
        """The line of a file just labelled."""
        return cls(rel, rows, stats.figures(), stats.label_counts)

    def to_json(self) -> str:
        """One line of JSON (absent parts left out)."""
        data = asdict(self)
        data["label_counts"] = None if self.label_counts is None else self.label_counts.to_json()
        return json.dumps({k: v for k, v in data.items() if v is not None})

    @classmethod
    def from_json(cls, line: str, where: str) -> Self:
        """One line; RecordError when it is torn or foreign. Lines written before the
        figures had their own key kept them at the top."""
        f = Fields.parse(line, where)
        stats = f.dict("stats", None)
        if stats is None and any(k in f.data for k in FIGURES):
            stats = {k: f.data[k] for k in FIGURES if k in f.data}
        return f.into(cls, stats=stats)


def append(run_dir: Path, shard: int, line: Line) -> None:
    """Append a finished file (after its marker)."""
    path = journal_path(run_dir, shard)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line.to_json() + "\n")


def entries(run_dir: Path, shard: int) -> dict[str, Line]:
    """Files of the shard's journal with what each line recorded (last wins)."""
    out: dict[str, Line] = {}
    try:
        lines = journal_path(run_dir, shard).read_text("utf-8").splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        entry = _parse(line)
        if entry is not None:
            out[entry.file] = entry
    return out


def rows_done(run_dir: Path, shard: int) -> dict[str, int]:
    """Files this shard's earlier attempts finished (file -> rows)."""
    return {rel: entry.rows for rel, entry in entries(run_dir, shard).items()}


def forget(run_dir: Path, shard: int, files: set[str]) -> None:
    """Drop ``files`` from the shard's journal (after a repair removed their markers)."""
    path = journal_path(run_dir, shard)
    if not path.exists():
        return
    lines = path.read_text("utf-8").splitlines()
    kept = [ln for ln in lines if (entry := _parse(ln)) is None or entry.file not in files]
    write_atomic(path, "".join(f"{line}\n" for line in kept).encode("utf-8"))


def _parse(line: str) -> Line | None:
    """One journal line, or None for a torn or foreign one."""
    try:
        return Line.from_json(line, "journal line")
    except RecordError:
        return None
