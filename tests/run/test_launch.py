"""The launcher chain's files: launch.json (one record, every field checked once) and
chain.jsonl (one event per line, a torn one skipped); one job name per run directory."""

import json

import pytest

from shardwise.errors import RecordError
from shardwise.run import launch
from shardwise.run.launch import ChainEvent, Launch, Step

REQUEST = Launch(name="shardwise-launch-abc", workdir="/w", python="/venv/bin/python",
                 snakemake_args=("--profile", "profiles/slurm"), time_minutes=480,
                 stop_before_seconds=300, cpus=2, mem_mb=8000, partition="cpu",
                 account="proj", created_at="2026-12-06T20:00:00")  # fmt: skip


def test_the_chain_name_is_one_per_run_directory(tmp_path):
    a, b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    assert launch.chain_name(a) == launch.chain_name(tmp_path / "a" / ".." / "a" / "run")
    assert launch.chain_name(a) != launch.chain_name(b)
    assert launch.chain_name(a).startswith("shardwise-launch-") and len(launch.chain_name(a)) == 29


def test_the_request_round_trips_and_a_stop_is_recorded(tmp_path):
    assert launch.load(tmp_path) is None
    launch.save(tmp_path, REQUEST)
    assert launch.load(tmp_path) == REQUEST
    launch.save(tmp_path, REQUEST.stopped("2026-12-06T21:00:00"))
    assert launch.load(tmp_path).stopped_at == "2026-12-06T21:00:00"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("time_minutes", "480", "field 'time_minutes'"),
        ("cpus", 0, "time_minutes, cpus and mem_mb must be positive"),
        ("stop_before_seconds", -1, "field 'stop_before_seconds' must be a count >= 0"),
        ("snakemake_args", "--profile x", "field 'snakemake_args'"),
    ],
)
def test_a_damaged_request_is_refused_naming_the_file_and_field(tmp_path, field, value, message):
    body = json.loads(REQUEST.to_json())
    body[field] = value
    path = launch.launch_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(body))
    with pytest.raises(RecordError, match=message) as e:
        launch.load(tmp_path)
    assert str(path) in str(e.value)


def test_events_are_read_oldest_first_and_a_torn_line_is_skipped(tmp_path):
    first = ChainEvent(at="t1", job_id="18", step=Step.STARTED, host="n1", text="started")
    second = ChainEvent(at="t2", job_id="18", step=Step.SUCCESSOR, detail="19", text="queued")
    launch.append(tmp_path, first)
    with launch.chain_path(tmp_path).open("a") as fh:
        fh.write('{"at": "t1.5", "job_id": "18", "st')  # a launcher killed mid-line
        fh.write("\n")
    launch.append(tmp_path, second)
    assert launch.events(tmp_path) == [first, second]
    with launch.chain_path(tmp_path).open("a") as fh:
        fh.write(json.dumps({"at": "t3", "job_id": "1", "step": "exploded"}) + "\n")
    assert launch.events(tmp_path) == [first, second]  # a foreign step is not an event


def test_the_log_folder_exists_before_sbatch_opens_a_log_there(tmp_path):
    path = launch.log_path(tmp_path)
    assert path.name == "%j.log" and path.parent.is_dir()
