"""In-flight shards: live claims and queued jobs of the workflow are left out of a new run."""

import base64
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace

import pytest
from e2e import (
    Gate,
    gated_shardwise,
    ledger_counts,
    make_run,
    minimal_config,
    snakemake_cmd,
)
from slurm_samples import WRAP_SCRIPT, job

from shardwise.cli.main import main
from shardwise.demo.corpus import DemoSize, write_corpus
from shardwise.planner import inflight
from shardwise.run import claims, journal, markers
from shardwise.run.adoption import Holder, read_adoption
from shardwise.slurm import queries
from shardwise.snakefile import prepare_run


def _job(job_id, state="PENDING", **kw):
    return job(job_id, state, **kw)


SUBMITTER = inflight.Submitter(
    workdir="/work", snakefile="/repo/Snakefile", configfiles=("/work/demo/config.yaml",)
)


def test_the_plugins_wrap_command_gives_snakefile_configfiles_and_shards():
    assert inflight.parse_wrap(WRAP_SCRIPT) == claims.BatchScript(
        "/repo/Snakefile", ("/work/demo/config.yaml",), (6, 7)
    )
    assert inflight.parse_wrap("#!/bin/sh\nsleep 10\n").shards == ()


def _cache(run_dir, entries):
    path = run_dir / "claims" / claims.JOBS_CACHE
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {k: v.to_json() if isinstance(v, claims.BatchScript) else v for k, v in entries.items()}
    path.write_text(json.dumps(body))


def test_queued_jobs_of_this_workflow_are_matched_by_dir_snakefile_and_configfiles(tmp_path):
    ours = _job("41")
    other_dir = _job("42", workdir="/elsewhere")
    other_config = _job("43")
    not_plugin = _job("44", comment="")
    _cache(
        tmp_path,
        {
            "41@2026-12-01T06:00:00": inflight.parse_wrap(WRAP_SCRIPT),
            "43@2026-12-01T06:00:00": replace(
                inflight.parse_wrap(WRAP_SCRIPT), configfiles=("/work/other.yaml",)
            ),
        },
    )
    found = inflight.queued_shards(tmp_path, SUBMITTER, [ours, other_dir, other_config, not_plugin])
    assert found == {ours: [6, 7]}
    # entries of jobs no longer queued are dropped from the cache
    assert list(json.loads((tmp_path / "claims" / claims.JOBS_CACHE).read_text())) == [
        "41@2026-12-01T06:00:00",
        "43@2026-12-01T06:00:00",
    ]


def test_find_reports_queued_and_claimed_shards_but_not_done_ones(tmp_path):
    _cache(tmp_path, {"41@2026-12-01T06:00:00": inflight.parse_wrap(WRAP_SCRIPT)})
    queue = queries.Answer([_job("41"), _job("50", state="RUNNING", workdir="/other")])
    with claims.held(tmp_path, 2):
        flight = inflight.find(tmp_path, SUBMITTER, done={7}, queue=queue)
    assert sorted(flight.shards) == [2, 6]
    assert flight.shards[6] == inflight.Flying(
        shard=6, job_id="41", state="PENDING", since="2026-12-01T06:00:00", holder="SLURM job 41"
    )
    assert flight.shards[2].job_id is None and flight.shards[2].state == "running"
    lines = flight.lines()
    assert lines[0].startswith("in flight 2 shard(s) held by 2 live job(s) of an earlier")
    assert any(line.strip().startswith("shards 6") and "job 41" in line for line in lines)


def test_stale_claims_are_ignored_and_said_so(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    stale = replace(claims.for_this_process(3), pid=proc.pid)
    claims.claim_path(tmp_path, 3).parent.mkdir(parents=True)
    claims.claim_path(tmp_path, 3).write_bytes(stale.to_bytes())
    flight = inflight.find(tmp_path, None)
    assert (flight.shards, flight.stale_claims) == ({}, (3,))
    assert flight.notes == ("1 stale claim(s) ignored (their jobs are gone): shards 3",)


def test_without_claims_or_a_cluster_executor_nothing_is_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(queries, "jobs", lambda **kw: pytest.fail("squeue was called"))
    assert inflight.find(tmp_path, replace(SUBMITTER, cluster=False)) == inflight.InFlight()


def test_squeue_that_does_not_answer_leaves_claims_trusted(tmp_path):
    claim = replace(claims.for_this_process(1), host="node9", slurm_job_id="77")
    claims.claim_path(tmp_path, 1).parent.mkdir(parents=True)
    claims.claim_path(tmp_path, 1).write_bytes(claim.to_bytes())
    down = queries.Answer(None, "`squeue` did not answer within 30 s", "timeout")
    flight = inflight.find(tmp_path, SUBMITTER, queue=down)
    assert list(flight.shards) == [1] and not flight.shards[1].certain
    assert flight.notes[0].startswith("squeue did not answer")


def _incomplete_flag(workdir, path):
    name = base64.urlsafe_b64encode(str(path).encode()).decode()
    flag = workdir / ".snakemake" / "incomplete" / name
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.write_text("{}")
    return flag


def test_incomplete_flags_of_the_runs_shard_markers_are_cleared_others_kept(tmp_path):
    """A marker is written last and whole: one that exists is complete, one that does not is
    missing. The flags a killed Snakemake left would make the next one rerun the shards its
    adopted jobs finish, so every flag of a shard marker goes; flags of other paths stay."""
    run_dir = tmp_path / "run"
    markers.write_shard_marker(
        run_dir,
        markers.ShardMarker(
            shard=0, total_shards=4, minimum_shard_index=0, tasks=1, files=1, docs=1
        ),
    )
    done_flag = _incomplete_flag(tmp_path, run_dir / "shards" / "0.done")
    flying_flag = _incomplete_flag(tmp_path, run_dir / "shards" / "1.done")  # its job runs on
    relative_flag = _incomplete_flag(tmp_path, "run/shards/2.done")
    other_flag = _incomplete_flag(tmp_path, tmp_path / "elsewhere" / "0.done")
    assert inflight.clear_stale_incomplete(run_dir, str(tmp_path)) == [0, 1, 2]
    assert not done_flag.exists() and not flying_flag.exists() and not relative_flag.exists()
    assert other_flag.exists()


def _planned(tmp_path):
    write_corpus(tmp_path / "corpus", DemoSize(files_per_category=1, docs_per_file=2))
    return minimal_config(tmp_path, tmp_path / "corpus", sharding={"total_shards": 4})


def test_planning_adopts_shards_a_checkable_holder_claims_and_prints_them(tmp_path):
    cfg = _planned(tmp_path)
    prepare_run(cfg, main_process=True, dryrun=True, out=io.StringIO())
    submitter = replace(SUBMITTER, workdir=str(tmp_path), cluster=False)
    with claims.held(tmp_path / "run", 1):  # a live process on this host
        out = io.StringIO()
        info = prepare_run(cfg, main_process=True, dryrun=True, out=out, submitter=submitter)
    marker = str(tmp_path / "run" / "shards" / "1.done")
    assert (info.in_flight, info.adopted) == ((1,), (1,))
    assert marker in info.targets() and len(info.targets()) == 4  # waits for its holder
    assert (info.group(1), info.group(0)) == ("classify_adopted", "classify")  # alone
    (end,) = info.holder_end(1)  # its wait: the adopt job of this process (pid<pid>)
    assert end.endswith(f"claims/adopted/{info.adoption_token}/pid{os.getpid()}.json")
    assert info.holder_end(0) == []
    assert info.when_settled("report.png") == ["report.png"]  # adopted shards are waited for
    assert "in flight 1 shard(s) held by 1 live job(s) of an earlier invocation: adopted" in (
        out.getvalue()
    )
    assert inflight.Submitter.recorded(tmp_path / "run") == submitter
    assert read_adoption(tmp_path / "run") is None  # a dry run writes no adoption
    again = prepare_run(cfg, main_process=True, dryrun=True, out=io.StringIO())
    assert (again.in_flight, again.adopted, again.when_settled("x")) == ((), (), ["x"])


def test_a_holder_that_cannot_be_checked_is_left_out_and_the_run_not_settled(tmp_path):
    cfg = _planned(tmp_path)
    prepare_run(cfg, main_process=True, dryrun=True, out=io.StringIO())
    path = claims.claim_path(tmp_path / "run", 2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(replace(claims.for_this_process(2), host="elsewhere").to_bytes())
    submitter = replace(SUBMITTER, workdir=str(tmp_path), cluster=False)
    out = io.StringIO()
    info = prepare_run(cfg, main_process=True, dryrun=False, out=out, submitter=submitter)
    assert (info.in_flight, info.adopted, info.when_settled("report.png")) == ((2,), (), [])
    assert "cannot be checked from here: left out of this run" in out.getvalue()
    assert read_adoption(tmp_path / "run") is None


def test_a_real_planning_writes_the_adoption_the_adopt_checkpoint_reads(tmp_path):
    cfg = _planned(tmp_path)
    submitter = replace(SUBMITTER, workdir=str(tmp_path), cluster=False)
    prepare_run(cfg, main_process=True, out=io.StringIO(), submitter=submitter)
    with claims.held(tmp_path / "run", 3) as mine:
        info = prepare_run(cfg, main_process=True, out=io.StringIO(), submitter=submitter)
    adoption = read_adoption(tmp_path / "run")
    assert adoption is not None and adoption.token == info.adoption_token
    assert adoption.holders == (
        Holder(shards=(3,), pid=mine.pid, host=mine.host, process=mine.process),
    )
    assert info.adoption_end().endswith(f"claims/adopted/{info.adoption_token}/{{holder}}.json")
    assert info.holder_end(3) == [info.adoption_end().replace("{holder}", f"pid{mine.pid}")]


def test_coverage_json_lists_in_flight_shards(tmp_path, capsys):
    cfg = _planned(tmp_path)
    prepare_run(cfg, main_process=True, dryrun=True, out=io.StringIO())
    with claims.held(tmp_path / "run", 2):
        assert main(["coverage", "--run-dir", str(tmp_path / "run"), "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [f["shard"] for f in doc["in_flight"]] == [2]
        assert main(["coverage", "--run-dir", str(tmp_path / "run")]) == 0
        assert "in flight 1 shard(s)" in capsys.readouterr().out


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.race
def test_local_run_killed_with_sigkill_is_finished_by_the_same_command_run_again(
    tmp_path, demo_models
):
    """kill -9 of the main process while two shard processes run: the same command, run
    again with no --unlock, clears the dead process's lock, adopts the two orphans, waits
    for them and labels the rest; every shard runs once."""
    config = make_run(tmp_path, demo_models, total_shards=4)
    gate = Gate(tmp_path / "gate")
    gated = gated_shardwise(tmp_path / "bin", tmp_path / "ledger", gate)  # the first run's jobs
    env = gated_shardwise(tmp_path / "bin", tmp_path / "ledger")  # later runs' jobs go on
    run_dir = tmp_path / "run"
    cmd = snakemake_cmd(config, "--cores", "2", "--rerun-incomplete")
    first = subprocess.Popen(cmd, env=gated, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        held = sorted(gate.wait(2, alive=lambda: first.poll() is None))  # two jobs in flight
    finally:
        os.kill(first.pid, signal.SIGKILL)  # the main process only: its shard jobs go on
        first.wait()
    assert sorted(claims.read_claims(run_dir)) == held
    log_path = tmp_path / "second.log"
    with log_path.open("w") as log:
        second = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        adopted = "of an earlier invocation (shards"  # one line per adopted holder
        _wait_for(lambda: log_path.read_text().count(adopted) == 2, 300, "the adoption")
        assert second.poll() is None  # it waits for the orphans
        gate.open()  # the orphaned jobs finish their shards now
        assert second.wait(timeout=600) == 0, log_path.read_text()[-3000:]
    finally:
        if second.poll() is None:
            second.kill()
    log = log_path.read_text()
    assert "cleared Snakemake's lock" in log and "LockException" not in log, log[-3000:]
    assert "in flight 2 shard(s) held by 2 live job(s) of an earlier invocation: adopted" in log
    for shard in held:
        assert f"shards {shard} " in log
    # an adopted shard's classify job runs once its holder ended: the holder had
    # finished it, so it only found its files marked (nothing labelled twice: journals)
    runs = ledger_counts(tmp_path / "ledger")
    assert runs == {s: 2 if s in held else 1 for s in range(4)}
    for shard in range(4):
        lines = journal.journal_path(run_dir, shard).read_text().splitlines()
        labelled = Counter(journal.Line.from_json(line, "journal").file for line in lines)
        assert labelled and max(labelled.values()) == 1, (shard, labelled)
    assert main(["verify", "--run-dir", str(run_dir), "--complete"]) == 0
    assert (run_dir / "report" / "coverage.png").exists()
