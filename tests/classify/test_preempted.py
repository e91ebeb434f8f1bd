"""A shard job stopped by SIGTERM requeues its own SLURM job only when SLURM preempts it."""

from shardwise.classify import preempted
from shardwise.run import jobevents
from shardwise.slurm.queries import Answer

SHOWN = {"JobId": "12", "JobState": "RUNNING", "Partition": "main", "Requeue": "1", "Restarts": "0"}


class Slurm:
    """What ``scontrol show job`` says, and the requeues asked for."""

    def __init__(self, monkeypatch, **fields):
        self.fields = {**SHOWN, **fields}
        self.requeued: list[str] = []
        monkeypatch.setattr(preempted.queries, "job_detail", self.detail)
        monkeypatch.setattr(preempted.control, "requeue", self.requeue)

    def detail(self, job_id, timeout):
        return Answer(self.fields)

    def requeue(self, job_id, timeout):
        self.requeued.append(job_id)
        return Answer(True)


def test_outside_slurm_nothing_is_asked(tmp_path, monkeypatch):
    slurm = Slurm(monkeypatch, PreemptTime="2026-12-06T05:31:46")
    assert preempted.requeue_if_preempted(tmp_path, 3, env={}) is None
    assert slurm.requeued == []


def test_a_walltime_warning_is_left_to_snakemakes_retry(tmp_path, monkeypatch):
    slurm = Slurm(monkeypatch, PreemptTime="None")
    assert preempted.requeue_if_preempted(tmp_path, 3, env={"SLURM_JOB_ID": "12"}) is None
    assert slurm.requeued == [] and jobevents.load(tmp_path) == []


def test_a_preempted_job_requeues_itself_and_records_it(tmp_path, monkeypatch):
    slurm = Slurm(monkeypatch, PreemptTime="2026-12-06T05:31:46", Restarts="2")
    said = preempted.requeue_if_preempted(tmp_path, 3, env={"SLURM_JOB_ID": "12"})
    assert said == (
        "job 12 (shard 3) was preempted in partition main: it requeued itself, and its shards "
        "resume from their last finished file in the same job"
    )
    assert slurm.requeued == ["12"]
    (event,) = jobevents.load(tmp_path)
    assert (event.job_id, event.kind, event.shards, event.run, event.action) == (
        "12", "preempted", (3,), 2, "requeued",
    )  # fmt: skip


def test_a_job_that_may_not_be_requeued_is_left_to_snakemake(tmp_path, monkeypatch):
    slurm = Slurm(monkeypatch, PreemptTime="2026-12-06T05:31:46", Requeue="0")
    said = preempted.requeue_if_preempted(tmp_path, 3, env={"SLURM_JOB_ID": "12"})
    assert (
        said
        == "job 12 is preempted in partition main and may not be requeued: Snakemake retries it"
    )
    assert slurm.requeued == []
