"""Where a launcher chain stands, from its request, its events and its live jobs; what a
generation does after Snakemake ended; the status text."""

import pytest
from slurm_samples import job

from shardwise.ops.launch.chain import ChainStatus, Generation, State, generations, state_of
from shardwise.ops.launch.generation import Outcome, decide
from shardwise.ops.launch.render import status_text
from shardwise.run.launch import ChainEvent, Launch, Step

REQUEST = Launch(name="shardwise-launch-abc", workdir="/w", python="/p",
                 snakemake_args=("--profile", "profiles/slurm"), time_minutes=480,
                 stop_before_seconds=300, cpus=2, mem_mb=8000)  # fmt: skip


def event(step, job_id="18", **over):
    over.setdefault("text", f"{step} text")
    return ChainEvent(at="2026-12-06T20:00:00", job_id=job_id, step=step, host="n1", **over)


@pytest.mark.parametrize(
    ("launch", "last", "live", "state"),
    [
        (None, None, (), State.NONE),
        (REQUEST.stopped("t"), event(Step.STOPPING), (job("19", "RUNNING"),), State.STOPPED),
        (REQUEST, event(Step.SUCCESSOR), (job("18", "RUNNING"), job("19")), State.RUNNING),
        (REQUEST, event(Step.SUBMITTED), (job("18"),), State.QUEUED),
        (REQUEST, event(Step.COMPLETE), (), State.COMPLETE),
        (REQUEST, event(Step.ENDED), (), State.ENDED),
        (REQUEST, event(Step.NO_SUCCESSOR), (), State.ENDED),
        (REQUEST, event(Step.STOPPING), (), State.BROKEN),  # its successor never came
    ],
)
def test_the_chain_state(launch, last, live, state):
    assert state_of(launch, last, live) is state


def test_generations_are_the_launchers_that_started_with_what_each_did_last():
    events = [
        event(Step.SUBMITTED),
        event(Step.STARTED),
        event(Step.SUCCESSOR, detail="19"),
        event(Step.STOPPING),
        event(Step.STARTED, "19"),
        event(Step.COMPLETE, "19"),
    ]
    assert generations(events) == (
        Generation("18", "n1", "2026-12-06T20:00:00", events[3]),
        Generation("19", "n1", "2026-12-06T20:00:00", events[5]),
    )


@pytest.mark.parametrize(
    ("returncode", "stopped_by", "progress", "outcome"),
    [
        (-9, "its walltime is near", 0, Outcome(Step.STOPPING, True, 0)),
        (0, None, 0, Outcome(Step.COMPLETE, False, 0)),
        (1, None, 3, Outcome(Step.PROGRESS, True, 1)),
        (1, None, 0, Outcome(Step.ENDED, False, 1)),
    ],
)
def test_snakemake_s_end_decides_the_chain_s_next_step(returncode, stopped_by, progress, outcome):
    assert decide(returncode, stopped_by, progress) == outcome


def test_the_status_names_each_generation_how_it_ended_and_what_is_queued(tmp_path):
    events = [event(Step.STARTED), event(Step.STOPPING), event(Step.STARTED, "19")]
    status = ChainStatus(run_dir=tmp_path, launch=REQUEST, state=State.RUNNING,
                         generations=generations(events),
                         live=(job("19", "RUNNING"), job("20", reason="Dependency"),
                               job("21", reason="Dependency")),
                         last=events[-1], shard_jobs=(job("7", "RUNNING"), job("8")),
                         done_shards=3,
                         ended={"18": "TIMEOUT", "17": "CANCELLED by 0"})  # fmt: skip
    assert status_text(status).splitlines() == [
        f"launcher chain of {tmp_path}: running (a launcher runs the workflow; nothing to do)",
        "  job name shardwise-launch-abc: 480 min, 2 CPU(s), 8000 MB; snakemake stopped 300 s "
        "before each walltime",
        "  snakemake --profile profiles/slurm",
        "  generation 1: job 18 on n1 since 2026-12-06T20:00:00 [ended TIMEOUT]: stopping text",
        "  generation 2: job 19 on n1 since 2026-12-06T20:00:00 [running]: started text",
        "  queued launchers that never ran: 17 (CANCELLED by 0)",
        "  live: launcher job 19 RUNNING",
        "  live: launcher job 20 PENDING (Dependency)",
        "  live: launcher job 21 PENDING (Dependency)",
        "  queued behind it: 20, 21",
        "  shard jobs of the run: 1 running, 1 queued; 3 shard(s) done",
        f"  logs: {tmp_path}/logs/launch/<job id>.log",
    ]


def test_a_broken_chain_does_not_repeat_a_promise_that_did_not_come_true(tmp_path):
    said = "stopped snakemake because it was cancelled; the next launcher (job 26) adopts them"
    last = event(Step.STOPPING, text=said)
    status = ChainStatus(run_dir=tmp_path, launch=REQUEST, state=State.BROKEN,
                         generations=generations([event(Step.STARTED), last]), live=(),
                         last=last, shard_jobs=(), done_shards=0,
                         ended={"18": "CANCELLED by 0", "26": "CANCELLED by 0"})  # fmt: skip
    lines = status_text(status).splitlines()
    assert "  queued launchers that never ran: 26 (CANCELLED by 0)" in lines
    assert lines[-2] == (
        "  last said (before every launcher ended; no launcher is queued now): " + said
    )
