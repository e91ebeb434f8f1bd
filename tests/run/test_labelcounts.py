"""Per-file label counts: exact, sparse, UTF-8 bytes; pairs from the config."""

import json

import numpy as np
import pyarrow as pa
import pytest

from shardwise.config import resolve_pairs
from shardwise.errors import ConfigError
from shardwise.run import filestats, labelcounts
from shardwise.run.labelcounts import LabelCounts


def _columns(name: str, labels: list[str], ids: list[int]) -> dict[str, pa.Array]:
    names = pa.array(labels, pa.string())
    return {
        f"{name}_label": names.take(pa.array(ids, pa.int32())),
        f"{name}_label_id": pa.array(ids, pa.int32()),
    }


def test_counts_documents_and_text_bytes_per_label_and_pair_sparsely():
    texts = ["héllo", "", "abc", "日本", "xyz"]  # 6, 0, 3, 6, 3 bytes
    nbytes = labelcounts.text_bytes(texts)
    cols = {
        **_columns("topic", ["Adult", "Health", "Travel"], [1, 1, 2, 1, 2]),
        **_columns("format", ["FAQ", "Listicle"], [0, 1, 0, 0, 0]),
    }
    counts = labelcounts.count_labels(cols, nbytes, ["topic", "format"], [("topic", "format")])
    assert nbytes.tolist() == [6, 0, 3, 6, 3]
    assert counts.to_json() == {
        "format_version": 1,
        "docs": 5,
        "text_bytes": 18,
        "classifiers": {
            "topic": {"Health": [3, 12], "Travel": [2, 6]},
            "format": {"FAQ": [4, 18], "Listicle": [1, 0]},
        },
        "pairs": {
            "topic,format": {
                "Health": {"FAQ": [2, 12], "Listicle": [1, 0]},
                "Travel": {"FAQ": [2, 6]},
            }
        },
    }


def test_an_empty_file_has_empty_counts():
    cols = _columns("topic", ["A"], [])
    counts = labelcounts.count_labels(cols, labelcounts.text_bytes([]), ["topic"])
    assert counts.to_json() == {
        "format_version": 1,
        "docs": 0,
        "text_bytes": 0,
        "classifiers": {"topic": {}},
        "pairs": {},
    }


def test_counts_of_100k_documents_are_vectorised_and_sum_to_the_file():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 24, 100_000)
    cols = {**_columns("topic", [f"t{i}" for i in range(24)], ids.tolist()),
            **_columns("format", [f"f{i}" for i in range(24)], ids[::-1].tolist())}  # fmt: skip
    nbytes = rng.integers(0, 5000, 100_000)
    counts = labelcounts.count_labels(cols, nbytes, ["topic", "format"], [("topic", "format")])
    cells = [c for row in counts.pairs["topic,format"].values() for c in row.values()]
    assert sum(c[0] for c in cells) == 100_000
    assert sum(c[1] for c in cells) == int(nbytes.sum()) == counts.text_bytes


def test_default_pairs_are_the_weborganizer_pairs_whose_classifiers_exist():
    four = ["topic", "topic_nourl", "format", "format_nourl"]
    assert resolve_pairs(four, None) == [
        ("topic", "format"),
        ("topic_nourl", "format_nourl"),
    ]
    assert resolve_pairs(["topic", "format"], None) == [("topic", "format")]
    assert resolve_pairs(["quality"], None) == []
    assert resolve_pairs(four, []) == []


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([["topic", "genre"]],
         r"domains.pairs\[0\]: topic,genre names unknown classifier\(s\) genre"),
        ([["topic", "topic"]], r"pairs a classifier with itself"),
        ([["topic", "format"], ["topic", "format"]],
         r"domains.pairs\[1\]: topic,format is listed twice"),
    ],
)  # fmt: skip
def test_pairs_naming_unknown_classifiers_are_refused(pairs, message):
    with pytest.raises(ConfigError, match=message):
        resolve_pairs(["topic", "format"], pairs)


def test_config_validation_refuses_an_unknown_pair_before_anything_runs(tmp_path):
    from e2e import minimal_config

    from shardwise.config import Settings
    from shardwise.run.context import RunSettings

    cfg = minimal_config(tmp_path, domains={"pairs": [["topic", "format"]]})
    with pytest.raises(ConfigError, match="unknown classifier.*format; the classifiers are topic"):
        Settings.from_config(cfg)
    ok = Settings.from_config(minimal_config(tmp_path))
    assert json.loads(RunSettings.of(ok).to_json())["domains"] == {"pairs": []}


def test_stats_keep_label_counts_on_one_compact_line_and_parse_back():
    counts = {"format_version": 1, "docs": 2, "text_bytes": 9,
              "classifiers": {"topic": {"Health": [2, 9]}}, "pairs": {}}  # fmt: skip
    stats = {"file": "a.jsonl", "docs": 2, "label_counts": counts}
    text = filestats.stats_bytes(stats).decode()
    assert json.loads(text) == stats
    assert text.splitlines()[-2] == (
        '  "label_counts": {"classifiers":{"topic":{"Health":[2,9]}},"docs":2,'
        '"format_version":1,"pairs":{},"text_bytes":9}'
    )
    assert filestats.stats_bytes({"file": "a"}) == b'{\n  "file": "a"\n}\n'


def test_adding_counts_sums_every_cell():
    one = {"docs": 1, "text_bytes": 3, "classifiers": {"t": {"A": [1, 3]}},
           "pairs": {"t,f": {"A": {"X": [1, 3]}}}}  # fmt: skip
    two = {"docs": 2, "text_bytes": 5, "classifiers": {"t": {"A": [1, 2], "B": [1, 3]}},
           "pairs": {"t,f": {"A": {"X": [1, 2]}, "B": {"Y": [1, 3]}}}}  # fmt: skip
    parts = [LabelCounts.from_json(one, "one"), LabelCounts.from_json(two, "two")]
    assert LabelCounts.total(parts).to_json() == {
        "format_version": 1,
        "docs": 3,
        "text_bytes": 8,
        "classifiers": {"t": {"A": [2, 5], "B": [1, 3]}},
        "pairs": {"t,f": {"A": {"X": [2, 5]}, "B": {"Y": [1, 3]}}},
    }
