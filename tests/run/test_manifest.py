import pytest

from shardwise.errors import InputError
from shardwise.run.manifest import (
    Selection,
    Task,
    build_tasks,
    category_of,
    select_files,
)

LISTING = [
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


def test_select_files_keeps_supported_formats_sorted_and_reports_what_it_skips():
    chosen = select_files(LISTING, output_prefix="")
    assert chosen == Selection(
        files=[
            ("a/y/part-0.parquet", 20),
            ("b/x/part-1.jsonl.gz", 10),
            ("c/z/part-8.jsonl", 7),
            ("c/z/part-9.jsonl.zst", 7),
        ],
        hidden=["a/y/.part-2.parquet.tmp-1", "a/y/_SUCCESS"],
        outputs=[
            "a/y/part-0.parquet.labels.parquet",
            "a/y/part-0.parquet.stats.json",
            "a/y/part-0.parquet.done",
        ],
        unsafe=[],
        other=["a/y/readme.txt"],  # matched by the glob, not an input: reported, never silent
    )
    assert select_files(LISTING, fmt="parquet", output_prefix="").files == [
        ("a/y/part-0.parquet", 20)
    ]
    assert select_files(LISTING, glob="c/**").files == [
        ("c/z/part-8.jsonl", 7),
        ("c/z/part-9.jsonl.zst", 7),
    ]
    assert select_files(LISTING, glob="**/part-1.*").files == [("b/x/part-1.jsonl.gz", 10)]
    assert select_files([("top.parquet", 1)], glob="**/*.parquet").files == [("top.parquet", 1)]


def test_output_names_are_inputs_unless_they_lie_under_the_output_root():
    listing = [("data/x.labels.parquet", 1), ("labels/y.jsonl.labels.parquet", 2)]
    elsewhere = select_files(listing)
    assert (elsewhere.files, elsewhere.outputs) == (sorted(listing), [])
    below = select_files(listing, output_prefix="labels/")
    assert below.files == [("data/x.labels.parquet", 1)]
    assert below.outputs == ["labels/y.jsonl.labels.parquet"]


def test_unsafe_names_are_all_listed_with_reasons_and_the_fix():
    listing = [("ok.jsonl", 1), ("a\\b.jsonl", 2), ("x/\x01.parquet", 3)]
    with pytest.raises(InputError) as info:
        select_files(listing)
    assert str(info.value) == (
        "2 input file name(s) cannot be used safely in an output path:\n"
        "  'a\\\\b.jsonl': a backslash is a path separator for Windows tools and some stores\n"
        "  'x/\\x01.parquet': it holds control characters\n"
        "Rename them, narrow input.glob to leave them out, or set "
        "input.skip_unsafe_names: true to plan without them (they are then listed on "
        "every dry run and never labelled)."
    )
    skipped = select_files(listing, skip_unsafe=True)
    assert skipped.files == [("ok.jsonl", 1)]
    assert [rel for rel, _ in skipped.unsafe] == ["a\\b.jsonl", "x/\x01.parquet"]


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
