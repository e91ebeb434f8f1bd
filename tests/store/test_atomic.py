import os

import pytest

from shardwise.store import atomic
from shardwise.store.atomic import create_exclusive, write_atomic


def test_write_atomic_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "d" / "f.json"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.json"]


def test_create_exclusive_never_replaces(tmp_path):
    target = tmp_path / "run.json"
    assert create_exclusive(target, b"first") is True
    assert create_exclusive(target, b"second") is False
    assert target.read_bytes() == b"first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_failed_rename_keeps_old_content_and_removes_temp(tmp_path, monkeypatch):
    target = tmp_path / "f"
    write_atomic(target, b"old")

    def boom(self, other):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.Path, "replace", boom)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]
