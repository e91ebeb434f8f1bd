"""The job keeper's rounds: what it asks SLURM, what it does, and the line and event it leaves.

SLURM's answers and actions are monkeypatched onto the keeper module's own names; the jobs
are kept by ``AdoptedJobs``, a real implementation of the keeper's ``Jobs`` (it records
the ends reported). The real cluster runs the same keeper in tests/slurm/test_preemption.py.
"""

import io

from slurm_samples import job

from shardwise.run import jobevents, markers
from shardwise.runtime import keeper as keeper_mod
from shardwise.runtime.adopt import AdoptedJobs
from shardwise.runtime.fates import Duty
from shardwise.runtime.keeper import Keeper
from shardwise.slurm.queries import Answer


class Queue:
    """squeue's rows, round by round, and what the keeper asked SLURM to do."""

    def __init__(self, *rounds):
        self.rounds = list(rounds)
        self.requeued: list[str] = []
        self.cancelled: list[str] = []
        self.refuse_requeue = False
        self.state_after_refusal = "PREEMPTED"

    def jobs_by_id(self, ids, timeout):
        rows = self.rounds.pop(0)
        return rows if isinstance(rows, Answer) else Answer([r for r in rows if r.id in ids])

    def job_states(self, ids, timeout):
        return Answer({i: self.state_after_refusal for i in ids})

    def requeue(self, job_id, timeout):
        self.requeued.append(job_id)
        return (
            Answer(None, "scontrol requeue: disabled", "failed")
            if self.refuse_requeue
            else Answer(True)
        )

    def cancel(self, ids, timeout):
        self.cancelled += list(ids)
        return Answer(True)


def keeper(tmp_path, monkeypatch, queue, jobs, duty):
    monkeypatch.setattr(keeper_mod.queries, "jobs_by_id", queue.jobs_by_id)
    monkeypatch.setattr(keeper_mod.control, "requeue", queue.requeue)
    monkeypatch.setattr(keeper_mod.control, "cancel", queue.cancel)
    monkeypatch.setattr(keeper_mod.queries, "job_states", queue.job_states)
    monkeypatch.setattr(
        keeper_mod.queries, "run_history", lambda job_id, timeout: Answer(["PREEMPTED", "PENDING"])
    )
    return Keeper(run_dir=tmp_path, jobs=jobs, duty=duty, every=0.01, out=io.StringIO())


def test_a_preempted_job_is_requeued_with_one_line_and_one_event(tmp_path, monkeypatch):
    queue = Queue([job("7", "RUNNING")], [job("7", "PREEMPTED", partition="main", requeue=True)])
    jobs = AdoptedJobs({"7": (3, 4)})
    k = keeper(tmp_path, monkeypatch, queue, jobs, Duty.own(plugin_requeue=True))
    assert (k.check(), k.check()) == (1, 1)
    assert queue.requeued == ["7"] and jobs.ended == {}
    assert k.out.getvalue() == (
        "shardwise: job 7 (shards 3-4) was preempted in partition main (PREEMPTED): requeued, "
        "its shards resume from their last finished file in the same job\n"
    )
    (event,) = jobevents.load(tmp_path)
    assert (event.job_id, event.kind, event.shards, event.action, event.run) == (
        "7", "preempted", (3, 4), "requeued", 0,
    )  # fmt: skip


def test_a_refused_requeue_ends_the_job_and_snakemake_retries_it(tmp_path, monkeypatch):
    queue = Queue([job("7", "PREEMPTED", requeue=True)])
    queue.refuse_requeue = True
    jobs = AdoptedJobs({"7": (3,)})
    k = keeper(tmp_path, monkeypatch, queue, jobs, Duty.own(plugin_requeue=True))
    assert k.check() == 0
    assert jobs.ended == {"7": False}
    line = k.out.getvalue()
    assert "SLURM refused to requeue it (scontrol requeue: disabled)" in line
    assert line.rstrip().endswith(
        "1 of 1 shard(s) left (shards 3): Snakemake submits them again, each resuming from its "
        "last finished file"
    )


def test_a_refused_requeue_of_a_job_that_requeued_itself_ends_nothing(tmp_path, monkeypatch):
    queue = Queue([job("7", "PREEMPTED", requeue=True)], [job("7", "PENDING", restarts=1)])
    queue.refuse_requeue, queue.state_after_refusal = True, "PENDING"
    jobs = AdoptedJobs({"7": (3,)})
    k = keeper(tmp_path, monkeypatch, queue, jobs, Duty.own(plugin_requeue=True))
    assert (k.check(), k.check()) == (1, 1)
    assert jobs.ended == {}  # nothing reported: Snakemake submits no second job of shard 3
    assert k.out.getvalue().count("\n") == 1 and "requeued" in k.out.getvalue()


def test_a_job_lost_from_squeue_is_ended_by_what_its_markers_say(tmp_path, monkeypatch):
    for shard in (1, 2):
        markers.write_shard_marker(
            tmp_path,
            markers.ShardMarker(
                shard=shard, total_shards=4, minimum_shard_index=0, tasks=1, files=1, docs=1
            ),
        )
    queue = Queue([job("7", "COMPLETED"), job("8", "RUNNING")], [], [], [])
    jobs = AdoptedJobs({"7": (1, 2), "8": (3,)})
    k = keeper(tmp_path, monkeypatch, queue, jobs, Duty.own(plugin_requeue=True))
    assert [k.check() for _ in range(3)] == [2, 2, 0]
    assert jobs.ended == {"7": True, "8": False}
    lines = k.out.getvalue().splitlines()
    assert lines[0].endswith(
        "(last seen COMPLETED; MinJobAge passed, or the controller lost it): 2 of 2 shard(s) done"
    )
    assert "(last seen RUNNING;" in lines[1] and "1 of 1 shard(s) left" in lines[1]
    assert [e.kind for e in jobevents.load(tmp_path)] == ["lost", "lost"]


def test_squeue_silent_judges_nothing(tmp_path, monkeypatch):
    queue = Queue(Answer(None, "squeue timed out", "timeout"), Answer(None, "again", "timeout"))
    jobs = AdoptedJobs({"7": (1,)})
    k = keeper(tmp_path, monkeypatch, queue, jobs, Duty.own(plugin_requeue=True))
    assert (k.check(), k.check()) == (1, 1)
    assert jobs.ended == {} and k.out.getvalue() == ""


def test_a_requeue_slurm_did_names_its_cause_from_the_jobs_history(tmp_path, monkeypatch):
    queue = Queue(
        [job("7", "RUNNING", partition="main")], [job("7", "PENDING", partition="main", restarts=1)]
    )
    k = keeper(
        tmp_path, monkeypatch, queue, AdoptedJobs({"7": (5,)}), Duty.own(plugin_requeue=True)
    )
    k.check()
    k.check()
    assert k.out.getvalue() == (
        "shardwise: job 7 (shards 5) was preempted in partition main and requeued by SLURM; "
        "its shards resume from their last finished file in the same job\n"
    )
    (event,) = jobevents.load(tmp_path)
    assert (event.kind, event.run) == ("preempted", 0)


def test_a_job_held_after_a_requeue_is_cancelled(tmp_path, monkeypatch):
    held = job("7", "PENDING", restarts=1, reason="launch failed requeued held")
    queue = Queue([held], [held])
    k = keeper(
        tmp_path, monkeypatch, queue, AdoptedJobs({"7": (5,)}), Duty.own(plugin_requeue=True)
    )
    k.check()
    k.check()
    assert queue.cancelled == ["7"]
    assert "which only an operator can release: cancelled" in k.out.getvalue()


def test_the_job_s_own_stop_record_names_a_preemption_only_for_the_run_that_ended(
    tmp_path, monkeypatch
):
    """Without accounting: the shard job's record of this run says preempted; a record of
    an earlier run (its requeue's event came after it) does not make a node failure one."""
    from shardwise.run import failures

    monkeypatch.setenv("SLURM_JOB_ID", "7")
    failures.record_failure(tmp_path, 5, [], cause=failures.preempted(" in partition gpu"))
    own = Duty.own(plugin_requeue=True)

    def requeued(before, after):
        k = keeper(tmp_path, monkeypatch, Queue([before], [after]), AdoptedJobs({"7": (5,)}), own)
        no_accounting = Answer(None, "sacct: accounting is off")
        monkeypatch.setattr(keeper_mod.queries, "run_history", lambda *a, **kw: no_accounting)
        k.check()
        k.check()
        return k.out.getvalue()

    first = requeued(job("7", "RUNNING"), job("7", "PENDING", restarts=1))
    assert "was preempted in partition gpu and requeued by SLURM" in first, first
    assert [e.kind for e in jobevents.load(tmp_path)] == ["preempted"]
    # the same job requeued again, by a node failure (no new record): not a preemption
    second = requeued(job("7", "RUNNING", restarts=1), job("7", "PENDING", restarts=2))
    assert "was requeued by SLURM (run 3)" in second, second


def test_an_adopted_job_that_ended_is_named_by_its_shards_own_record(tmp_path, monkeypatch):
    """No plugin reports an adopted job: a cut at its walltime says so, not "(FAILED)"
    alone; a preemption its shard recorded is counted as one."""
    from shardwise.run import failures

    monkeypatch.setenv("SLURM_JOB_ID", "9")
    failures.record_failure(tmp_path, 2, [], cause=failures.walltime_stop(5, 1), limit=5)
    monkeypatch.setenv("SLURM_JOB_ID", "8")
    failures.record_failure(tmp_path, 6, [], cause=failures.preempted(" in partition gpu"))
    queue = Queue([job("9", "FAILED"), job("8", "FAILED"), job("4", "COMPLETED")])
    jobs = AdoptedJobs({"9": (2,), "8": (6,), "4": (3,)})
    k = keeper(tmp_path, monkeypatch, queue, jobs, Duty.adopted())
    assert k.check() == 0
    lines = k.out.getvalue().splitlines()
    assert lines[2] == (
        "shardwise: job 9 (shards 2) ended in partition gpu (FAILED): stopped at its walltime "
        "(5 min) after 1 "
        "file(s) of this attempt; finished files stay done, and the retry asks for a longer "
        "walltime: 1 of 1 shard(s) left (shards 2): this run labels them"
    )
    said = "shardwise: job 8 (shards 6) ended in partition gpu (FAILED): preempted in partition"
    assert lines[1].startswith(said)
    assert lines[0] == (
        "shardwise: job 4 (shards 3) ended in partition gpu (COMPLETED): 1 of 1 shard(s) left "
        "(shards 3): this run labels them"
    )
    kinds = {e.job_id: e.kind for e in jobevents.load(tmp_path)}
    assert kinds == {"9": "ended", "8": "preempted", "4": "ended"}
