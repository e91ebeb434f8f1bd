"""Files that joined or left the input since it was planned: ``<run_dir>/drift.json``.

A corpus that grows or shrinks moves no planned task (the assignment is per task), and
``shardwise plan --extend`` takes the new set in. Until then every relisting dry run
refuses, naming the files, and records them here: coverage says so without a listing.
"""

from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

from shardwise.errors import RecordError
from shardwise.run import markers
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic

DRIFT_JSON = "drift.json"
#: Names kept as examples (the counts are of all of them).
EXAMPLES = 5


@dataclass(frozen=True)
class InputDrift:
    """The listed files the plan lacks and the planned files that are gone (sorted)."""

    added_files: tuple[str, ...] = ()
    gone_files: tuple[str, ...] = ()
    checked_at: str = ""
    format_version: int = 1

    @classmethod
    def of(cls, added: Collection[str], gone: Collection[str]) -> Self:
        """The record of these files, stamped now."""
        return cls(tuple(sorted(added)), tuple(sorted(gone)), markers.now())

    @property
    def added(self) -> int:
        return len(self.added_files)

    @property
    def gone(self) -> int:
        return len(self.gone_files)

    @property
    def added_examples(self) -> tuple[str, ...]:
        return self.added_files[:EXAMPLES]

    @property
    def gone_examples(self) -> tuple[str, ...]:
        return self.gone_files[:EXAMPLES]

    def counted(self) -> dict[str, Any]:
        """The JSON views print: counts and every file (``--format json``)."""
        return {
            "added": self.added,
            "gone": self.gone,
            "added_files": list(self.added_files),
            "gone_files": list(self.gone_files),
        }

    def __bool__(self) -> bool:
        return bool(self.added or self.gone)

    def summary(self) -> str:
        """``2 file(s) added ('a', 'b'), 1 planned file(s) gone ('c')``."""

        def part(n: int, names: tuple[str, ...], what: str) -> str:
            more = f", ... {n - len(names):,} more (all: --format json)" if n > len(names) else ""
            shown = ", ".join(repr(x) for x in names) + more
            return f"{n:,} {what} ({shown})" if n else f"0 {what}"

        text = f"{part(self.added, self.added_examples, 'file(s) added')}, "
        return text + f"{part(self.gone, self.gone_examples, 'planned file(s) gone')}"

    def lines(self, configfile: str = "<config>") -> list[str]:
        """The operator's line: what changed, and the one command that takes it in."""
        if not self:
            return []
        text = f"input    the input changed since it was planned: {self.summary()}. "
        text += f"Take it in under the same assignment: {extend_command(self, configfile)}"
        return [text]


def extend_command(drift: InputDrift, configfile: str = "<config>") -> str:
    """The command that takes the input's current file set into the run."""
    gone = " --gone keep|remove" if drift.gone else ""
    return f"`shardwise plan --extend{gone} --configfile {configfile}`"


def record(run_dir: Path, drift: InputDrift) -> None:
    """Write what the last listing found (remove the file when the sets agree)."""
    path = Path(run_dir) / DRIFT_JSON
    if not drift:
        path.unlink(missing_ok=True)
        return
    write_atomic(path, json_bytes(asdict(drift)))


def load(run_dir: Path) -> InputDrift:
    """What the last listing found (nothing recorded, or unreadable: no drift)."""
    path = Path(run_dir) / DRIFT_JSON
    try:
        return Fields.parse(path.read_bytes(), str(path)).into(InputDrift)
    except (FileNotFoundError, RecordError):
        return InputDrift()
