"""Atomic local writes: a reader sees the old file, the whole new file, or nothing.

Two writers share one helper that writes a hidden, fsynced temp file beside the
target: ``write_atomic`` renames it over the target (replace), ``create_exclusive``
hard-links it to the target (create-if-absent, never replaces; the loser of a race
learns it lost). Cleanup never masks the first error.
"""

import contextlib
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any


def _fsync_dir(directory: Path) -> None:
    """Best effort: makes the rename durable where the OS allows opening directories."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


#: The name of a temp file beside its target (left behind only by a killed writer).
_TEMP_NAME = re.compile(r"^\..+\.tmp-\d+-[0-9a-f]+$")


def is_temp_name(name: str) -> bool:
    """True for the name of a temp file an interrupted atomic write left behind."""
    return _TEMP_NAME.match(name) is not None


def _write_temp(target: Path, data: bytes) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def write_atomic(target: Path, data: bytes) -> None:
    """Replace ``target`` with ``data`` in one rename."""
    tmp = _write_temp(target, data)
    try:
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(target.parent)


def create_exclusive(target: Path, data: bytes) -> bool:
    """Create ``target`` with ``data`` unless it exists; return False if another writer won."""
    tmp = _write_temp(target, data)
    try:
        os.link(tmp, target)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    _fsync_dir(target.parent)
    return True


def json_bytes(data: Any) -> bytes:
    """Stable JSON bytes for every file shardwise writes (sorted keys, trailing newline)."""
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
