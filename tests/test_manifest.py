import pytest

from shardwise.errors import InputError
from shardwise.manifest import (
    Task,
    build_tasks,
    category_of,
    check_relative,
    file_format,
    select_files,
)


def test_select_files_keeps_supported_formats_sorted_and_skips_outputs_and_hidden():
    listing = [
        ("b/x/part-1.jsonl.gz", 10),
        ("a/y/part-0.parquet", 20),
        ("a/y/part-0.parquet.labels.parquet", 5),
        ("a/y/part-0.parquet.stats.json", 5),
        ("a/y/part-0.parquet.done", 5),
        ("a/y/.part-2.parquet.tmp-1", 5),
        ("a/y/_SUCCESS", 0),
        ("a/y/readme.txt", 3),
        ("c/z/part-9.jsonl.zst", 7),
        ("c/z/part-8.jsonl", 7),
    ]
    assert select_files(listing) == [
        ("a/y/part-0.parquet", 20),
        ("b/x/part-1.jsonl.gz", 10),
        ("c/z/part-8.jsonl", 7),
        ("c/z/part-9.jsonl.zst", 7),
    ]
    assert select_files(listing, fmt="parquet") == [("a/y/part-0.parquet", 20)]
    assert select_files(listing, glob="c/**") == [
        ("c/z/part-8.jsonl", 7),
        ("c/z/part-9.jsonl.zst", 7),
    ]
    assert select_files(listing, glob="**/part-1.*") == [("b/x/part-1.jsonl.gz", 10)]
    assert select_files([("top.parquet", 1)], glob="**/*.parquet") == [("top.parquet", 1)]


@pytest.mark.parametrize(
    "rel", ["../etc/passwd", "a/../../b.parquet", "/abs.parquet", "s3://x/y.parquet", "a\\b", "./a"]
)
def test_paths_that_could_escape_are_refused(rel):
    with pytest.raises(InputError, match="could escape the output prefix"):
        check_relative(rel)


def test_build_tasks_groups_consecutive_sorted_files():
    files = ["c.parquet", "a.parquet", "b.parquet"]
    assert build_tasks(files, 1) == [
        Task("a.parquet", ("a.parquet",)),
        Task("b.parquet", ("b.parquet",)),
        Task("c.parquet", ("c.parquet",)),
    ]
    assert build_tasks(files, 2) == [
        Task("a.parquet|b.parquet", ("a.parquet", "b.parquet")),
        Task("c.parquet", ("c.parquet",)),
    ]


def test_category_defaults_to_first_two_components():
    pattern = "^([^/]+/[^/]+)/"
    assert category_of("cc/science/part-7.jsonl.gz", pattern) == "cc/science"
    assert category_of("top.parquet", pattern) == "(root)"
    assert category_of("one/top.parquet", pattern) == "one"
    assert category_of("cc/science/x", r"^[^/]+") == "cc"


def test_file_format_by_extension():
    assert file_format("a.jsonl.zst") == "jsonl"
    assert file_format("a.parquet") == "parquet"
    assert file_format("a.json") is None
