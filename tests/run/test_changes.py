"""``changed.json``: a record read with every field checked, refused naming the field."""

from __future__ import annotations

import json

import pytest

from shardwise.errors import InputError
from shardwise.run import changes


def test_the_changed_files_round_trip_and_none_removes_the_file(tmp_path):
    changes.record(tmp_path, {"b.jsonl": ("10:1", "12:2"), "a.jsonl": ("5:1", "5:3")})
    files, checked = changes.load(tmp_path)
    assert files == {"a.jsonl": ("5:1", "5:3"), "b.jsonl": ("10:1", "12:2")} and checked
    body = json.loads((tmp_path / changes.CHANGED_JSON).read_text())
    assert body["files"]["a.jsonl"] == {"planned": "5:1", "now": "5:3"}
    changes.forget(tmp_path, {"a.jsonl", "b.jsonl"})
    assert not (tmp_path / changes.CHANGED_JSON).exists()
    assert changes.load(tmp_path) == ({}, "")


def test_a_damaged_entry_is_refused_naming_the_file_and_the_field(tmp_path):
    changes.record(tmp_path, {"a.jsonl": ("5:1", "5:3")})
    path = tmp_path / changes.CHANGED_JSON
    body = json.loads(path.read_text())
    body["files"]["a.jsonl"]["now"] = 7
    path.write_text(json.dumps(body))
    with pytest.raises(InputError, match=r"\[files\]\[a.jsonl\]: field 'now' must be a string"):
        changes.load(tmp_path)
    path.write_text('{"files": {"a.jsonl": 3}}')
    with pytest.raises(InputError, match="field 'files' must map names to objects.*delete it"):
        changes.load(tmp_path)
