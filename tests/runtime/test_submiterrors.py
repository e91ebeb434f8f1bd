"""sbatch's refusal of a group job reaches the console, against Snakemake's own GroupJob.

No cluster: a real ``snakemake.jobs.GroupJob`` holding two stand-in member jobs (the
members only need what ``GroupJob.log_error`` reads of them). The first test pins the
upstream bug the workaround exists for; on a Snakemake bump that fixes it, it fails and
says the wrapper can go.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from snakemake.jobs import GroupJob

from shardwise.runtime.submiterrors import show_submit_errors

REFUSAL = "sbatch: error: Batch job submission failed: Invalid node name specified"


class Member:
    """What GroupJob.log_error reads of a member job."""

    def __init__(self, shard: int, log: Path) -> None:
        self.wildcards_dict = {"shard": str(shard)}
        self.log = [str(log)]
        self.rule = SimpleNamespace(name="classify")

    def get_log_error_info(self, indent: bool = False, **kwargs: object) -> dict:
        return {"rule": "classify", "log": self.log}

    def log_error(self, indent: bool = False) -> None:
        logging.getLogger("snakemake.logging").error("Error in rule classify: message: None")


@pytest.fixture
def group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GroupJob:
    monkeypatch.setattr(GroupJob, "log_error", GroupJob.log_error)  # undone after the test
    job = GroupJob.__new__(GroupJob)  # no DAG: log_error needs only the id and the members
    job.groupid = "classify-group"
    job._jobs = [Member(3, tmp_path / "3.log"), Member(5, tmp_path / "5.log")]
    (tmp_path / "5.log").write_text("the job ran and logged this\n")
    return job


def test_snakemake_drops_the_message_of_a_group_job_error(group, caplog):
    with caplog.at_level(logging.ERROR):
        GroupJob.log_error(group, REFUSAL)
    assert caplog.records, "GroupJob.log_error logs nothing at all now: check the wrapper"
    assert all(REFUSAL not in r.getMessage() for r in caplog.records), (
        "Snakemake now prints a group job's message itself: shardwise's wrapper "
        "(runtime/submiterrors.py) only adds a second line and can go"
    )


def test_the_wrapper_logs_the_refusal_once_and_writes_it_into_empty_member_logs(
    group, caplog, tmp_path
):
    assert show_submit_errors(main_process=True)
    assert show_submit_errors(main_process=True)  # installed once, not wrapped twice
    with caplog.at_level(logging.ERROR):
        GroupJob.log_error(group, REFUSAL)
    shown = [r.getMessage() for r in caplog.records if REFUSAL in r.getMessage()]
    assert shown == [f"Error in group classify-group (shards 3, 5): {REFUSAL}"]
    assert (tmp_path / "3.log").read_text() == (
        f"shardwise: this shard's SLURM job was not started:\n{REFUSAL}\n"
    )
    assert (tmp_path / "5.log").read_text() == "the job ran and logged this\n"


def test_nothing_is_installed_inside_a_cluster_job():
    original = GroupJob.log_error
    assert show_submit_errors(main_process=False) is False
    assert GroupJob.log_error is original
