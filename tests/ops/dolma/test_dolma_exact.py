"""dolma mix's pattern matching: documents listed to match one file, attributes found exactly."""

from __future__ import annotations

import pytest

from shardwise.errors import ConfigError
from shardwise.ops.dolma.exact import (
    S3,
    AttributeSets,
    exact,
    group,
    matches,
    streams,
    write_extra_sets,
)
from shardwise.store.location import Location


def test_a_pattern_matches_part_by_part_never_across_a_slash():
    assert matches("a/q?.json.gz", "a/q1.json.gz") and matches("a/q?.json.gz", "a/q?.json.gz")
    assert not matches("a*/x.jsonl", "a/b/x.jsonl") and not matches("*", "a/b")
    assert exact("/ds/documents/a/q?.json.gz") == "/ds/documents/a/q[?].json.gz"
    assert exact("s3://b/documents/q*.jsonl") == "s3://b/documents/q[*].jsonl"
    assert exact("s3://b/documents/q1.jsonl") == "s3://b/documents/q1.jsonl"


def test_a_name_that_matches_another_file_is_read_from_a_set_of_its_own():
    files = ["a/q1.json.gz", "a/q?.json.gz", "a/q*.json.gz", "b/q?.json.gz", "a/r*.jsonl"]
    sets = group(files, set(files))
    # q? and q* match each other; b/q? and a/r* match no other file: the run's own set
    assert sets == AttributeSets(
        ("a/q1.json.gz", "b/q?.json.gz", "a/r*.jsonl"), (("a/q?.json.gz",), ("a/q*.json.gz",))
    )
    found = streams("w", Location("/ds/documents"), "labels", sets)
    assert [(s, a) for s, _, a in found] == [
        ("w", "labels"), ("w-exact-1", "labels-exact-1"), ("w-exact-2", "labels-exact-2")
    ]  # fmt: skip
    assert found[1][1] == ["/ds/documents/a/q[?].json.gz"]
    assert sets.only(lambda rel: "q?" not in rel).extra == ((), ("a/q*.json.gz",))


def test_a_name_holding_a_bracket_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r"1 file\(s\) exactly \(a/p\[1\]\.jsonl\).*with '\['"):
        group(["a/p[1].jsonl", "a/p1.jsonl"], set())


def test_extra_sets_are_copies_beside_the_run_s_set_with_nothing_stale(tmp_path):
    attributes = Location(str(tmp_path / "attributes" / "labels"))
    for rel in ("q1.jsonl", "q?.jsonl"):
        attributes.write_bytes(rel, rel.encode())
    stale = tmp_path / "attributes" / "labels-exact-1" / "old?.jsonl"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"from an earlier config")
    sets = group(["q1.jsonl", "q?.jsonl"], {"q1.jsonl", "q?.jsonl"})
    (extra,) = write_extra_sets(attributes, "labels", sets)
    assert extra.uri == str(tmp_path / "attributes" / "labels-exact-1")
    copied = {rel: extra.read_bytes(rel) for rel, _ in extra.list_files()}
    assert copied == {"q?.jsonl": b"q?.jsonl"}


def test_on_s3_only_a_star_is_a_pattern_and_one_matching_another_document_is_refused():
    files = ["a/q?.jsonl", "a/q1.jsonl", "a/p[1].jsonl", "a/r*.jsonl"]
    corpus = {*files, "a/r2.jsonl"}
    assert exact("s3://b/documents/a/q?.jsonl", S3) == "s3://b/documents/a/q?.jsonl"
    with pytest.raises(ConfigError, match=r"mix 1 file\(s\) exactly \(a/r\*\.jsonl\).*on S3"):
        group(files, set(files), S3, lambda: corpus)
    sets = group(files, set(files), S3, lambda: set(files))  # r* matches no other document
    assert sets == AttributeSets(tuple(files), ())
    listed = []
    assert group(files[:3], set(files), S3, lambda: listed.append(1) or set()).extra == ()
    assert listed == []  # no star: the corpus is not listed
