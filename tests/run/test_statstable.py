"""The columnar view of many files' stats: one reader for stats files, markers and
journals, every column derived from FileStats' figure marks."""

from __future__ import annotations

import json
import math

import numpy as np
from synthrun import stats_for

from shardwise.run.statstable import from_json as stats_from_json
from shardwise.run.statstable import from_rows as stats_table


def _stats(n: int = 10, **kw: object) -> list[dict]:
    return [stats_for(f"a/b/{i}.jsonl", 0, **kw) for i in range(n)]  # type: ignore[arg-type]


def test_duplicates_keep_latest() -> None:
    old = stats_for("x", 0, docs=1, finished_at="2026-01-01T00:00:00+00:00")
    new = stats_for("x", 0, docs=7, finished_at="2026-01-02T00:00:00Z")
    for rows in ([old, new], [new, old]):
        table = stats_table(rows)
        assert len(table) == 1 and table.docs[0] == 7
        table = stats_from_json([json.dumps(r, indent=2).encode() for r in rows])
        assert len(table) == 1 and table.docs[0] == 7


def test_bulk_json_matches_per_file_path() -> None:
    rows = [*_stats(5), {"file": "odd", "docs": None, "finished_at": "2026-01-01T00:00:00"}]
    blobs = [json.dumps(r, indent=1).encode() for r in rows] + [b"", b"  \n"]
    bulk, slow = stats_from_json(blobs), stats_table(rows)
    for name in ("docs", "tokens", "seconds", "bytes", "finished_at", "shard"):
        np.testing.assert_array_equal(getattr(bulk, name), getattr(slow, name))
    assert list(bulk.file) == list(slow.file)
    # A wrong type or a truncated file falls back to the per-file path and skips it.
    bad = [*blobs, b'{"file": "z", "docs": "many"}', b'{"file": "trunc']
    mixed = stats_from_json(bad)
    assert sorted(mixed.file) == sorted([*slow.file, "z"])
    assert math.isnan(mixed.docs[list(mixed.file).index("z")])
