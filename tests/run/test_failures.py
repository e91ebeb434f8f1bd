"""Failure records: what a failed attempt says, and why (its cause, read back)."""

import json

from shardwise.errors import (
    ConfigError,
    DeviceError,
    FieldMissingError,
    InputError,
    ModelError,
    StorageError,
)
from shardwise.run import failures


def field_error(name: str, path: str = "body") -> FieldMissingError:
    advice = "fields found: id, text. Did you mean 'text'? Fix input.text_field ..."
    return FieldMissingError(
        f"/data/{name}: input.text_field {path!r} is in none of its 40 row(s); {advice}",
        config_key="input.text_field",
        path=path,
        found=("id", "text"),
        advice=advice,
    )


def test_record_lists_files_and_cause_and_reads_back(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    cause = failures.Cause("input", "1 of 2 file(s) failed: boom", shared=False)
    path = failures.record_failure(
        tmp_path, 7, [{"file": "x.parquet", "error": "boom"}], cause=cause
    )
    data = json.loads(path.read_text())
    assert path.parent == tmp_path / "failures" / "7"
    assert data["failed"] == [{"file": "x.parquet", "error": "boom"}]
    assert data["interrupted"] is False
    assert (data["kind"], data["reason"], data["shared"]) == ("input", cause.reason, False)
    assert data["slurm_job_id"] == "4242"
    record = failures.latest(tmp_path, 7)
    assert record is not None
    assert (record.kind, record.reason, record.shared) == ("input", cause.reason, False)
    assert failures.latest(tmp_path, 8) is None


def test_latest_is_the_newest_record_and_an_interruption_is_not_a_failure(tmp_path):
    failures.record_failure(tmp_path, 1, [], cause=failures.Cause("model", "no model", True))
    failures.record_failure(tmp_path, 1, [], cause=failures.INTERRUPTED)
    record = failures.latest(tmp_path, 1)
    assert record.interrupted
    assert json.loads(record.path.read_text())["interrupted"] is True


def test_a_record_of_an_older_version_gets_a_reason(tmp_path):
    folder = tmp_path / "failures" / "2"
    folder.mkdir(parents=True)
    (folder / "20260101T000000000000Z-1.json").write_text(
        json.dumps({"shard": 2, "failed": [{"file": "a", "error": "a: bad\ndetail"}]})
    )
    record = failures.latest(tmp_path, 2)
    assert (record.kind, record.reason, record.shared) == ("error", "a: bad", False)


def test_a_field_every_file_lacks_is_a_shared_config_cause_without_file_names():
    errors = [field_error("a.jsonl"), field_error("b.parquet")]
    cause = failures.cause_of_files(errors, files=2, labelled=0, hint="quarantine ...")
    assert cause.kind == "config" and cause.shared
    assert cause.reason.startswith("input.text_field 'body' is in no row of any file; fields found")
    assert "/data/" not in cause.reason  # the same words on every shard
    assert "\n" not in cause.reason


def test_one_bad_file_is_not_shared_and_says_how_to_quarantine():
    errors = [InputError("/data/a.parquet: cannot read parquet file: truncated")]
    cause = failures.cause_of_files(errors, files=3, labelled=2, hint="`shardwise quarantine`")
    assert cause.kind == "input" and not cause.shared
    assert cause.reason.startswith("1 of 3 file(s) tried failed: /data/a.parquet: cannot read")
    assert cause.reason.endswith("`shardwise quarantine`")


def test_a_missing_field_in_some_files_only_is_not_shared():
    errors = [field_error("a.jsonl")]
    cause = failures.cause_of_files(errors, files=2, labelled=1, hint="")
    assert not cause.shared


def test_a_storage_error_among_file_errors_is_the_store_and_says_what_was_tried():
    errors = [StorageError("s3://b/a: retries exhausted")]
    cause = failures.cause_of_files(errors, files=6, labelled=0, hint="`shardwise quarantine`")
    assert cause == failures.Cause(
        "storage",
        "stopped after 1 of 6 file(s) tried (0 labelled, 5 not tried): s3://b/a: retries "
        "exhausted; the store did not answer, not the files: run again once it answers "
        "(`snakemake -n` lists the input through it), and leave the files in",
    )
    assert "quarantine" not in cause.reason


def test_whole_shard_causes():
    assert failures.cause_of(ModelError("model 'm': no such directory")).shared
    assert failures.cause_of(ConfigError("bad")).shared
    device = failures.cause_of(DeviceError("CUDA error on GPU 0 of node7"))
    assert device.kind == "device" and not device.shared  # one GPU: a retry elsewhere helps
    bug = failures.cause_of(KeyError("x"), "/data/a.parquet")
    assert (bug.kind, bug.shared) == ("error", False)
    assert bug.reason == "/data/a.parquet: KeyError: 'x'"


def _stop(run_dir, shard, cause, limit=None):
    return failures.record_failure(run_dir, shard, [], cause=cause, limit=limit)


def test_a_retry_doubles_the_walltime_only_after_a_stop_at_it(tmp_path):
    assert failures.longer_walltimes(tmp_path, 3, 1) == 0
    assert failures.longer_walltimes(tmp_path, 3, 2) == 0  # no record: the walltime was not it
    _stop(tmp_path, 3, failures.cancelled("CANCELLED"))
    assert failures.longer_walltimes(tmp_path, 3, 2) == 0  # a scancel keeps the walltime
    _stop(tmp_path, 3, failures.walltime_stop(60, 2))
    assert failures.longer_walltimes(tmp_path, 3, 2) == 1
    assert failures.longer_walltimes(tmp_path, 3, 3) == 1  # the cancel before it: no double
    _stop(tmp_path, 3, failures.fit_too_short(9), limit=9)
    assert failures.longer_walltimes(tmp_path, 3, 2) == 0
    (latest,) = failures.records(tmp_path, 3)[:1]
    assert (latest.kind, latest.limit_minutes, latest.interrupted) == ("fit_too_short", 9, True)


def test_the_fit_floor_rises_above_every_limit_that_cut_a_lowered_job_before_its_first_file(
    tmp_path,
):
    assert failures.fit_floor(tmp_path, [1, 2]) == 0
    _stop(tmp_path, 1, failures.fit_too_short(9), limit=9)
    _stop(tmp_path, 2, failures.fit_too_short(14), limit=14)
    _stop(tmp_path, 2, failures.walltime_stop(60, 3), limit=60)  # not the fit's
    assert failures.fit_floor(tmp_path, [1, 2]) == 15
    assert failures.fit_floor(tmp_path, [1]) == 10
    assert failures.fit_floor(tmp_path, [7]) == 0
