"""Every record of the run's files round-trips, and a damaged field is refused by name."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from shardwise.config import InferenceSettings, StorageOptions
from shardwise.errors import RecordError, RunMismatchError
from shardwise.run import quarantine
from shardwise.run.adoption import Adoption, Holder
from shardwise.run.claims import Submitter
from shardwise.run.context import (
    RecordedDolma,
    RecordedDomains,
    RecordedInput,
    RecordedRoots,
    RunSettings,
)
from shardwise.run.enginefigures import CalibrationFigures, EngineFigures, SelfCheck, Threshold
from shardwise.run.failures import FailedFile, FailureRecord
from shardwise.run.fidelity import FileFidelity
from shardwise.run.filestats import FileStats, Precision
from shardwise.run.jobevents import JobEvent
from shardwise.run.journal import Line
from shardwise.run.labelcounts import LabelCounts
from shardwise.run.labelling import Labelling
from shardwise.run.markers import FileMarker, ShardMarker
from shardwise.run.modelpin import ModelIdentity
from shardwise.run.plan import PlanSummary
from shardwise.run.record import Fields
from shardwise.run.runjson import InputChange, RunMeta

ENGINE = EngineFigures(
    docs=5, batches=1, batch_cost=None, recheck_margin=0.25, rechecked_docs={"topic": 2},
    attention_self_check=(SelfCheck("topic", docs=5, max_prob_diff=1e-6, passed=True),),
    calibration={"topic": CalibrationFigures(sample_docs=64, thresholds=(Threshold(512, 0.01),))},
    fidelity=(FileFidelity(classifier="topic", docs=5, fp32_docs=0, mode="recheck"),),
)  # fmt: skip
STATS = FileStats(
    file="a/b.jsonl.gz", task_id="a/b.jsonl.gz", shard=3, bytes=100, docs=5, tokens=40,
    seconds=1.5, timings={"read": 0.5, "infer": 1.0}, counts={"null_ids": 1},
    truncated_docs=0, models={"topic": ModelIdentity(content_hash="c", model="m/topic")},
    fidelity=(FileFidelity(classifier="topic", docs=5, fp32_docs=0, mode="recheck"),),
    device="cpu", device_name="cpu", dtype="float32", finished_at="2026-01-01T00:00:00+00:00",
    source_identity="100:7", labelling=Labelling(text_field="text", templates={"text": "{text}"}),
    precision=Precision("bfloat16", "auto"), engine=ENGINE,
    label_counts=LabelCounts(docs=5, text_bytes=9, classifiers={"topic": {"A": [5, 9]}}),
)  # fmt: skip
RECORDS = [
    STATS,
    FileMarker(
        file="a/b.jsonl.gz",
        task_id="a/b.jsonl.gz",
        shard=3,
        rows=5,
        finished_at="2026-01-01T00:00:00+00:00",
        source_identity="100:7",
    ),
    ShardMarker(
        shard=3,
        total_shards=8,
        minimum_shard_index=0,
        tasks=1,
        files=1,
        docs=5,
        finished_at="t",
        quarantined=1,
        file_stats={"a/b.jsonl.gz": STATS.figures()},
    ),
    RunSettings(
        input=RecordedInput("auto", "id", "text", "metadata.url"),
        storage=StorageOptions(),
        inference=InferenceSettings(max_length=128, recheck_margin=0.5, batch_size=8),
        domains=RecordedDomains(pairs=(("topic", "format"),)),
        roots=RecordedRoots(input="/in", output="s3://b/out"),
    ),
    RunSettings(
        input=RecordedInput("jsonl", "id", "text"),
        storage=StorageOptions(endpoint_url="http://localhost:9000"),
        domains=RecordedDomains(pairs=None, tokenizer="/tok"),
        roots=RecordedRoots(output="/out"),
        dolma=RecordedDolma(name="weborganizer", root="/data/attributes/weborganizer"),
    ),
    PlanSummary(
        fingerprint="ab",
        tasks=3,
        files=4,
        bytes=100,
        shards_total=8,
        shards_empty=5,
        built_at="2026-01-01T00:00:00+00:00",
        minimum_shard_index=0,
        files_per_task=1,
    ),
    FailureRecord(
        shard=3,
        failed=(FailedFile("a.jsonl", "bad"),),
        kind="input",
        reason="bad",
        slurm_job_id="17",
        hostname="n1",
        at="2026-01-01T00:00:00+00:00",
    ),
    Line("a/b.jsonl.gz", 5, STATS.figures(), LabelCounts(docs=5, tokens=7)),
    JobEvent(
        at="2026-12-06T05:31:46",
        job_id="12",
        kind="preempted",
        shards=(3, 4),
        state="PREEMPTED",
        partition="main",
        run=1,
        action="requeued",
        text="job 12 (shards 3-4) was preempted in partition main (PREEMPTED): requeued",
    ),
    Adoption(
        at="2026-12-06T05:38:20+00:00",
        token="15397-3360954e",
        holders=(Holder(shards=(2, 3), job_id="31"), Holder(shards=(5,), pid=42, host="login1")),
    ),
]
RUN_JSON = RunMeta.new(
    total_shards=8,
    minimum_shard_index=0,
    files_per_task=1,
    input_uri="/in",
    output_uri="/out",
    task_count=3,
    fingerprint="ab",
    classifiers=[("topic", "m/topic", "url_text")],
    labelling=Labelling(id_field="id", text_field="text", max_length=512),
    input_changes=(
        InputChange(at="t", tasks_added=1, tasks_removed=0, task_count=3, fingerprint="ab"),
    ),
    models={"topic": ModelIdentity(content_hash="c", revision="r")},
)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_a_record_round_trips(record):
    assert type(record).from_json(record.to_json(), "here") == record


@pytest.mark.parametrize(
    ("record", "field", "value", "message"),
    [
        (STATS, "docs", "5", "field 'docs' must be an integer"),
        (STATS, "tokens", -1, "field 'tokens' must be a count >= 0"),
        (STATS, "seconds", True, "field 'seconds' must be a number"),
        (STATS, "fidelity", [1], "field 'fidelity' must be an array of objects"),
        (
            STATS,
            "fidelity",
            [{"classifier": "t", "docs": "5", "fp32_docs": 0, "mode": "x"}],
            r"\[fidelity\]\[0\]: field 'docs' must be an integer",
        ),
        (STATS, "counts", {"null_ids": "x"}, "field 'null_ids' must be an integer"),
        (
            STATS,
            "engine",
            {"attention_self_check": [{"classifier": "t", "passed": "yes"}]},
            r"\[engine\] \[attention_self_check\]\[0\]: field 'passed' must be true or false",
        ),
        (
            STATS,
            "engine",
            {"calibration": {"topic": {"thresholds": [{"threshold": 0.1}]}}},
            r"\[calibration\]\[topic\] \[thresholds\]\[0\]: field 'max_tokens' is missing",
        ),
        (STATS, "engine", {"recheck_margin": [0.1]}, "field 'recheck_margin' must be float or str"),
        (STATS, "label_counts", {"docs": -2}, r"\[label_counts\]: field 'docs' must be a count"),
        (STATS, "precision", {"dtype": 16}, r"\[precision\]: field 'dtype' must be a string"),
        (RECORDS[1], "rows", 2.5, "field 'rows' must be an integer"),
        (RECORDS[1], "file", 7, "field 'file' must be a string"),
        (RECORDS[2], "total_shards", None, "field 'total_shards' must be an integer"),
        (RECORDS[2], "source", "cluster", "field 'source' must be one of"),
        (RECORDS[2], "file_stats", {"x": 1}, "field 'file_stats' must map each file"),
        (RECORDS[4], "input", {"format": 1}, "field 'format' must be a string"),
        (RECORDS[4], "dolma", {"root": "/a"}, "field 'name' is missing"),
        (RECORDS[5], "shards_empty", True, "field 'shards_empty' must be an integer"),
        (RECORDS[6], "failed", ["a.jsonl"], "field 'failed' must be an array of objects"),
        (RECORDS[6], "shared", "yes", "field 'shared' must be true or false"),
        (RECORDS[7], "rows", -1, "field 'rows' must be a count >= 0"),
        (RECORDS[8], "kind", "exploded", "field 'kind' must be one of"),
        (RECORDS[8], "run", -1, "field 'run' must be a count >= 0"),
        (RECORDS[9], "holders", [{"shards": [1]}, 3], "field 'holders' must be an array of obj"),
        (RECORDS[9], "token", 7, "field 'token' must be a string"),
    ],
)
def test_a_damaged_field_is_refused_naming_the_file_and_the_field(record, field, value, message):
    body = json.loads(record.to_json())
    body[field] = value
    with pytest.raises(RecordError, match=message) as refused:
        type(record).from_json(json.dumps(body).encode(), "out/a/b.jsonl.gz.x")
    assert str(refused.value).startswith("out/a/b.jsonl.gz.x")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("total_shards", True, "field 'total_shards' must be an integer, got True"),
        ("task_count", "3", "field 'task_count' must be an integer"),
        ("classifiers", [["topic", "m", "text"]], "field 'classifiers' must be an array of obj"),
        ("input_changes", [{"at": "t"}], r"\[input_changes\]\[0\] field 'tasks_added' is missing"),
        ("models", {"topic": "abc"}, "field 'models' must map names to objects"),
        ("models", {"topic": {"revision": 3}}, r"\[models\]\[topic\] field 'revision' must be a s"),
        ("labelling", {"max_length": "512"}, r"\[labelling\] field 'max_length' must be an int"),
        ("labelling", {"templates": {"text": 1}}, r"\[templates\] field 'text' must be a str"),
    ],
)
def test_run_json_round_trips_and_refuses_a_damaged_field_by_name(field, value, message):
    assert RunMeta.from_json(RUN_JSON.to_json(), "run.json") == RUN_JSON
    body = json.loads(RUN_JSON.to_json())
    body[field] = value
    with pytest.raises(RunMismatchError, match=message) as refused:
        RunMeta.from_json(json.dumps(body).encode(), "/runs/r/run.json")
    assert str(refused.value).startswith("/runs/r/run.json is damaged: not a valid shardwise")


def test_the_quarantine_file_round_trips_and_refuses_a_damaged_entry_by_name():
    entries = {"a.jsonl": quarantine.Entry("a.jsonl", "corrupt", "t", "me@host")}
    assert quarantine.from_json(quarantine.to_json(entries), "q.json") == entries
    with pytest.raises(RecordError, match=r"q.json \[files\] \[a.jsonl\]: field 'reason'"):
        quarantine.from_json(b'{"files": {"a.jsonl": {"reason": 5}}}', "q.json")
    with pytest.raises(RecordError, match="q.json: field 'files' is missing"):
        quarantine.from_json(b'{"format_version": 1}', "q.json")


def test_a_required_field_that_is_absent_is_named():
    body = json.loads(RECORDS[2].to_json())
    del body["shard"]
    with pytest.raises(RecordError, match="field 'shard' is missing"):
        ShardMarker.from_json(json.dumps(body).encode(), "shards/3.done")


def test_settings_name_a_damaged_nested_field():
    body = json.loads(RECORDS[3].to_json())
    body["input"]["text_field"] = ["text"]
    with pytest.raises(RecordError, match=r"settings.json \[input\]: field 'text_field'"):
        RunSettings.from_json(json.dumps(body).encode(), "settings.json")


def test_not_json_and_not_an_object_are_refused():
    with pytest.raises(RecordError, match="x: not valid JSON"):
        Fields.parse(b"{half", "x")
    with pytest.raises(RecordError, match="x: not a JSON object"):
        Fields.parse(b"[]", "x")


def test_the_workflow_record_round_trips_and_a_damaged_one_is_absent(tmp_path):
    submitter = Submitter(
        workdir="/w",
        snakefile="/w/Snakefile",
        configfiles=("/w/c.yaml",),
        cluster=True,
        parallel=40,
        host="login1",
        pid=7,
        started_at="t",
    )
    submitter.record(tmp_path)
    assert Submitter.recorded(tmp_path) == submitter
    (tmp_path / "claims" / "workflow.json").write_text('{"workdir": 1}')
    assert Submitter.recorded(tmp_path) is None


ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"


DOCUMENTED = [*RECORDS, RUN_JSON]


@pytest.mark.parametrize("record", DOCUMENTED, ids=lambda r: type(r).__name__)
def test_the_architecture_doc_lists_exactly_the_keys_each_record_writes(record):
    """docs/ARCHITECTURE.md's file table cannot drift from the records (the keys any
    record of the type writes: optional ones included)."""
    name = type(record).__name__
    (line,) = [
        ln for ln in ARCHITECTURE.read_text().splitlines() if f"`{name}`" in ln and "keys:" in ln
    ]
    listed = re.search(r"keys: ((?:`\w+`(?: \([^)]*\))?(?:, )?)+)", line).group(1)
    written = set().union(*(json.loads(r.to_json()) for r in DOCUMENTED if type(r) is type(record)))
    assert sorted(re.findall(r"`(\w+)`", listed)) == sorted(written)
