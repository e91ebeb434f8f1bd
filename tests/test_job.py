"""Shard-job bookkeeping that needs no model: progress journal, failure records."""

import json

from shardwise import job


def test_progress_journal_survives_a_torn_last_line(tmp_path):
    job._journal(tmp_path, 3, "a.parquet", 10)
    job._journal(tmp_path, 3, "b.parquet", 5)
    with (tmp_path / "progress" / "3.jsonl").open("a") as fh:
        fh.write('{"file": "c.parq')  # killed mid-append
    assert job.read_progress(tmp_path, 3) == {"a.parquet": 10, "b.parquet": 5}
    assert job.read_progress(tmp_path, 4) == {}


def test_failure_record_lists_files_and_interruption(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    path = job.record_failure(
        tmp_path, 7, [{"file": "x.parquet", "error": "boom"}], interrupted=True
    )
    data = json.loads(path.read_text())
    assert path.parent == tmp_path / "failures" / "7"
    assert data["failed"] == [{"file": "x.parquet", "error": "boom"}]
    assert data["interrupted"] is True
    assert data["slurm_job_id"] == "4242"


def test_output_markers_snapshot_roundtrip(tmp_path):
    job.write_output_markers(tmp_path, {"b", "a"})
    assert (tmp_path / job.OUTPUT_MARKERS).read_text() == "a\nb\n"
