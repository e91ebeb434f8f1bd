"""Files that left the input after they were labelled, their outputs kept: ``retired.json``.

``plan --extend --gone keep`` leaves the labels of gone files where they are, on purpose:
no view counts them, and ``verify`` reads ``{format_version, files}`` so that they are not
orphans (``--gone remove`` deletes them and records nothing).
"""

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic

RETIRED_JSON = "retired.json"


@dataclass(frozen=True)
class Retired:
    """The retired files whose outputs stay under the output root."""

    files: tuple[str, ...] = ()
    format_version: int = 1


def load(run_dir: Path) -> set[str]:
    """The retired files (none recorded: empty); a damaged record names its file."""
    path = Path(run_dir) / RETIRED_JSON
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return set()
    return set(Fields.parse(raw, str(path)).into(Retired).files)


def add(run_dir: Path, files: Iterable[str]) -> None:
    """Record ``files`` as retired with their outputs kept (atomically; idempotent)."""
    new = load(run_dir) | set(files)
    write_atomic(Path(run_dir) / RETIRED_JSON, json_bytes(asdict(Retired(tuple(sorted(new))))))
