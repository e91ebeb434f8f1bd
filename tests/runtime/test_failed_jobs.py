"""What the console says of failed shard jobs, and when a run stops early."""

import logging
import time
from types import SimpleNamespace

import pytest
from snakemake.jobs import GroupJob, Job

from shardwise.run import failures
from shardwise.runtime import failed_jobs
from shardwise.runtime.failed_jobs import FailureLog

SHARED = failures.Cause("config", "input.text_field 'body' is in no row of any file; ...", True)


def book(tmp_path, stop_after=2, **kw) -> FailureLog:
    return FailureLog(run_dir=tmp_path, since=time.time(), stop_after=stop_after, **kw)


def test_a_reason_is_said_once_then_counted(tmp_path):
    log = book(tmp_path)
    assert log.add(3, SHARED) == f"shard 3 failed: {SHARED.reason}"
    assert log.add(5, SHARED) == "shard 5 failed: the same reason as shard 3 (2 shards so far)"
    assert log.add(5, SHARED) == "shard 5 failed again, for the same reason"  # a retry
    other = failures.Cause("input", "1 of 4 file(s) failed: /d/a.parquet: truncated")
    assert log.add(6, other) == f"shard 6 failed: {other.reason}"
    assert log.summary()[:3] == [
        "3 shard(s) failed in this run, for 2 reason(s):",
        f"  2 (shards 3,5): {SHARED.reason}",
        f"  1 (shards 6): {other.reason}",
    ]


def test_the_first_failures_sharing_one_unfixable_reason_stop_the_run(tmp_path):
    log = book(tmp_path)
    log.add(1, SHARED)
    assert log.should_stop(set()) is None  # one failure is not a pattern
    log.add(2, SHARED)
    assert log.should_stop(set()) == SHARED.reason
    assert "the first 2 shards to fail all failed for shard 1's reason" in log.stop_line()
    assert log.should_stop(set()) is None  # said once


def test_no_stop_on_file_errors_after_a_success_or_when_switched_off(tmp_path):
    bad_file = failures.Cause("input", "1 of 3 file(s) failed: x")
    log = book(tmp_path)
    for shard in range(5):
        log.add(shard, failures.Cause("input", f"1 of 3 file(s) failed: file {shard}"))
    assert log.should_stop(set()) is None  # single bad files never stop a run
    log = book(tmp_path, done_at_start=frozenset({9}))
    log.add(1, SHARED)
    log.add(2, SHARED)
    assert log.should_stop({9, 4}) is None  # shard 4 succeeded in this run: not the first jobs
    assert log.should_stop({9}) == SHARED.reason
    log = book(tmp_path, stop_after=0)
    log.add(1, SHARED)
    log.add(2, SHARED)
    assert log.should_stop(set()) is None
    mixed = book(tmp_path)
    mixed.add(1, SHARED)
    mixed.add(2, bad_file)
    mixed.add(3, SHARED)
    assert mixed.should_stop(set()) is None  # not all the first failures share it


def test_causes_read_this_invocations_records_else_the_log(tmp_path):
    log_file = tmp_path / "3.log"
    log_file.write_text("shard 3: 0/2 file(s)\rprogress\nKilled by signal 9\n\n")
    failures.record_failure(tmp_path, 3, [], cause=SHARED)
    log = book(tmp_path)
    log.since = time.time() + 60  # the record is from an earlier invocation
    [(shard, cause)] = log.causes([(3, str(log_file))])
    assert shard == 3 and cause.kind == "killed" and not cause.shared
    assert cause.reason.endswith("its log ends: Killed by signal 9")
    log.since = time.time()
    assert log.causes([(3, str(log_file))]) == [(3, SHARED)]
    # a group job: members without a record did not run; the one that did says why
    assert log.causes([(4, None), (3, None), (5, None)]) == [(3, SHARED)]


def test_summary_is_empty_without_failures(tmp_path):
    assert book(tmp_path).summary() == []


# -- the hook, on Snakemake's own Job and GroupJob classes ------------------------------


class Member:
    """What Job/GroupJob.log_error and the hook read of a classify job."""

    def __init__(self, shard: int, log) -> None:
        self.wildcards_dict = {"shard": str(shard)}
        self.log = [str(log)]
        self.rule = SimpleNamespace(name="classify")
        self.restart_times = 3
        self.attempt = 1
        self.messages: list = []

    def get_log_error_info(self, indent: bool = False, **kwargs: object) -> dict:
        return {"rule": "classify", "log": self.log}

    def log_error(self, msg=None, indent: bool = False) -> None:
        self.messages.append(msg)


@pytest.fixture
def hooked(tmp_path, monkeypatch):
    """The hook installed on a fresh copy of GroupJob/Job.log_error (undone after)."""
    monkeypatch.setattr(GroupJob, "log_error", GroupJob.log_error)
    monkeypatch.setattr(Member, "log_error", Member.log_error)
    monkeypatch.setattr(Job, "log_error", Member.log_error)  # Job's wrapper wraps this
    workflow = SimpleNamespace(scheduler=SimpleNamespace(keepgoing=True))
    log = failed_jobs.install(workflow, tmp_path, stop_after=2, now=time.time)
    monkeypatch.setattr(Member, "log_error", Job.log_error)  # members are Jobs: wrapped
    return workflow, log


def group_of(tmp_path, shards) -> GroupJob:
    job = GroupJob.__new__(GroupJob)  # no DAG: log_error needs only the id and the members
    job.groupid = "classify-group"
    job._jobs = [Member(s, tmp_path / f"{s}.log") for s in shards]
    job._attempt = 1
    return job


def test_each_failed_member_gets_its_reason_and_a_shared_one_stops_the_run(
    tmp_path, hooked, caplog
):
    workflow, log = hooked
    failures.record_failure(tmp_path, 3, [], cause=SHARED)
    failures.record_failure(tmp_path, 5, [], cause=SHARED)
    first = group_of(tmp_path, [3, 4])  # shard 4 never ran: the group stopped at 3
    with caplog.at_level(logging.ERROR):
        GroupJob.log_error(first)
    assert first.jobs[0].messages == [f"shard 3 failed: {SHARED.reason}"]
    assert first.jobs[1].messages == [None]
    assert workflow.scheduler.keepgoing  # one failure is not a pattern
    second = group_of(tmp_path, [5])
    with caplog.at_level(logging.ERROR):
        GroupJob.log_error(second)
    assert second.jobs[0].messages == [
        "shard 5 failed: the same reason as shard 3 (2 shards so far)"
    ]
    assert workflow.scheduler.keepgoing is False
    assert second.attempt == second.jobs[0].restart_times + 1  # not retried
    stop = [r.getMessage() for r in caplog.records if "stopping the run" in r.getMessage()]
    assert len(stop) == 1
    assert log.summary()[0] == "2 shard(s) failed in this run, for 1 reason(s):"
