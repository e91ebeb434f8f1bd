"""Input files changed in place after they were labelled: ``<run_dir>/changed.json``.

A file rewritten under the same name keeps its markers, yet its labels describe content
that no longer exists. The plan records each file's identity (size and mtime, or ETag: free
with the listing); each relisting dry run records here the labelled files whose identity
changed, for coverage; ``verify --repair`` relabels them, ``--accept-changed`` keeps their
labels.
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from shardwise.errors import InputError, RecordError
from shardwise.run import markers
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic

CHANGED_JSON = "changed.json"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Change:
    """One labelled file's identity as planned and as listed now (``size:version``)."""

    planned: str
    now: str


@dataclass(frozen=True, kw_only=True)
class Changed:
    """``changed.json``: the labelled files changed in place, when it was checked."""

    format_version: int = FORMAT_VERSION
    checked_at: str = ""
    files: dict[str, Change] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json_bytes(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Parse the file; RecordError naming the field when it is not one."""
        return Fields.parse(raw, where).into(cls)


def record(run_dir: Path, changed: Mapping[str, tuple[str, str]]) -> None:
    """Write the labelled files changed in place (remove the file when there are none)."""
    path = Path(run_dir) / CHANGED_JSON
    if not changed:
        path.unlink(missing_ok=True)
        return
    files = {rel: Change(a, b) for rel, (a, b) in sorted(changed.items())}
    write_atomic(path, Changed(checked_at=markers.now(), files=files).to_json())


def load(run_dir: Path) -> tuple[dict[str, tuple[str, str]], str]:
    """(file -> (planned, now), when it was checked); nothing recorded: ({}, "")."""
    path = Path(run_dir) / CHANGED_JSON
    try:
        body = Changed.from_json(path.read_bytes(), str(path))
    except FileNotFoundError:
        return {}, ""
    except (OSError, RecordError) as e:
        msg = f"{path} is unreadable ({e}); delete it: the next dry run writes it again"
        raise InputError(msg) from e
    return {rel: (c.planned, c.now) for rel, c in body.files.items()}, body.checked_at


def forget(run_dir: Path, files: set[str]) -> None:
    """Drop ``files`` from the record (relabelled, or their labels accepted)."""
    changed, _checked = load(run_dir)
    if any(rel in changed for rel in files):
        record(run_dir, {rel: c for rel, c in changed.items() if rel not in files})


def lines(changed: Mapping[str, tuple[str, str]], run_dir: Path, limit: int = 3) -> list[str]:
    """The operator's line: which files, and the two ways on."""
    if not changed:
        return []
    shown = "; ".join(f"{rel} ({a} -> {b})" for rel, (a, b) in sorted(changed.items())[:limit])
    more = ""
    if len(changed) > limit:
        more = f"; ... {len(changed) - limit} more (all: `shardwise coverage --run-dir {run_dir} "
        more += "--format json`, changed_files)"
    text = f"changed  {len(changed):,} labelled input file(s) changed in place since they were "
    text += f"labelled (size:version): {shown}{more}. Relabel them: `shardwise verify --run-dir "
    text += f"{run_dir} --repair`; keep their labels: `shardwise verify --run-dir {run_dir} "
    text += "--accept-changed`"
    return [text]
