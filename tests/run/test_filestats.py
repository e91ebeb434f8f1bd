"""``<rel>.stats.json``: one record, whose figure marks are the one stats schema.

What the shard marker and the journal keep (``FIGURES``), what the bulk reader reads
(``ARROW_SCHEMA``, ``run/statstable.py``) and what coverage totals are all derived from
the marks on ``FileStats``: a new figure is its field and the code that computes it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pyarrow as pa
from inproc import plan_run

import shardwise
from shardwise.run import statstable
from shardwise.run.filestats import ARROW_SCHEMA, FIGURES, FileStats, figure_fields

TESTS = Path(__file__).resolve().parents[1]


def test_the_figures_the_bulk_schema_and_the_columns_come_from_the_marks():
    marked = [f.name for f in fields(FileStats) if "figure" in f.metadata]
    assert list(FIGURES) == marked and "docs" in marked and "models" not in marked
    assert ARROW_SCHEMA.names == ["file", "shard", *marked]
    assert list(statstable.columns()) == ARROW_SCHEMA.names
    stats = FileStats(file="a", docs=3, counts={"null_ids": 1}, device_name="H100")
    assert stats.figures() == {**dict.fromkeys(FIGURES), "docs": 3, "counts": {"null_ids": 1},
                               "device_name": "H100"}  # fmt: skip
    table = statstable.from_rows([{**stats.figures(), "file": "a", "shard": 2}])
    bulk = statstable.from_json([stats.to_json()])
    for name, how in figure_fields().items():  # the markers' path reads as the files'
        assert len(table.column(name)) == 1 == len(bulk.column(name)), name
        if how.column in ("number", "time"):
            np.testing.assert_array_equal(table.column(name), bulk.column(name))
    assert table.shard.tolist() == [2] and bulk.shard.tolist() == [-1]  # not in the file
    assert pa.types.is_struct(ARROW_SCHEMA.field("counts").type)


def _patched_package(tmp_path: Path) -> Path:
    """A copy of the package with one more figure, ``chars``, added as a developer would:
    its field on FileStats (with the coverage total ``chars_done``) and the code that
    computes it (here: 7 per document, in the record's builder). Nothing else."""
    root = tmp_path / "pkg"
    shutil.copytree(Path(shardwise.__file__).parent, root / "shardwise")
    path = root / "shardwise" / "run" / "filestats.py"
    text = path.read_text()
    anchor = '    tokens: int | None = figure("number", total="tokens_done")\n'
    computed = "file=rel,"
    assert text.count(anchor) == 1 and text.count(computed) == 1
    text = text.replace(
        anchor, anchor + '    chars: int | None = figure("number", total="chars_done")\n'
    )
    text = text.replace(computed, "file=rel, chars=7 * docs,")
    path.write_text(text)
    return root


SCRIPT = """
import json, sys
from pathlib import Path
from inproc import label
from shardwise.cli.main import main
from shardwise.run import markers
run_dir = Path(sys.argv[1])
label(run_dir)
done = sorted(markers.done_shards(run_dir))
markers.shard_marker_path(run_dir, done[0]).unlink()  # its files: read from their stats
main(["coverage", "--run-dir", str(run_dir), "--format", "json"])
"""


def test_a_new_figure_shows_in_coverage_json_with_no_other_edit(tmp_path):
    cfg = plan_run(tmp_path, total_shards=2)
    package = _patched_package(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package), str(TESTS)])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, cfg["run_dir"]], env=env, text=True,
                          capture_output=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["files_done"] == report["files_total"] > 1 and report["shards_done"] == 1
    assert report["chars_done"] == 7 * report["docs_done"] > 0
