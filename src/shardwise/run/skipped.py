"""Listed input files that are neither inputs nor shardwise outputs: ``skipped.json``.

A corpus in an unexpected layout (another suffix, the other format) must never look
complete while part of it was never work: every relisting dry run records how many files
``input.glob`` matched and did not take, with a few names, for coverage to say so too.
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Self

from shardwise.errors import RecordError
from shardwise.run import markers
from shardwise.run.reader import SUFFIX_LIST
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic

SKIPPED_JSON = "skipped.json"
#: Names kept as examples (the count is of all of them).
EXAMPLES = 5


@dataclass(frozen=True)
class Skipped:
    """How many listed files were not taken, and a few of their names."""

    count: int = 0
    examples: tuple[str, ...] = ()
    checked_at: str = ""
    format_version: int = 1

    @classmethod
    def of(cls, names: Sequence[str]) -> Self:
        """The record of ``names``, stamped now."""
        return cls(len(names), tuple(sorted(names)[:EXAMPLES]), markers.now())

    def lines(self, fmt: str) -> list[str]:
        """The operator's line: what was left out, and the config change either way."""
        if not self.count:
            return []
        shown = ", ".join(repr(n) for n in self.examples)
        hidden = self.count - len(self.examples)
        more = f", ... {hidden:,} more" if hidden > 0 else ""
        take = f"convert or rename them to one of {SUFFIX_LIST}"
        take = "set input.format: auto to take both formats" if fmt != "auto" else take
        text = f"skipped  {self.count:,} listed file(s) that input.glob matches are neither "
        text += f"inputs nor shardwise outputs and are NOT labelled: {shown}{more}. To label "
        text += f"them, {take}; to leave them out on purpose, narrow input.glob"
        return [text]


def record(run_dir: Path, names: Sequence[str]) -> None:
    """Write what the listing left out (remove the file when nothing was)."""
    path = Path(run_dir) / SKIPPED_JSON
    if not names:
        path.unlink(missing_ok=True)
        return
    write_atomic(path, json_bytes(asdict(Skipped.of(names))))


def load(run_dir: Path) -> Skipped:
    """What the last listing left out (nothing recorded, or unreadable: nothing)."""
    path = Path(run_dir) / SKIPPED_JSON
    try:
        return Fields.parse(path.read_bytes(), str(path)).into(Skipped)
    except (FileNotFoundError, RecordError):
        return Skipped()
