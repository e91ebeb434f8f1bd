"""`cluster check`'s preemption rows: what a preempted shard job does, and the overlay's fix."""

from dataclasses import replace

from test_cluster_check import facts, request

from shardwise.ops.cluster import check as cluster_check
from shardwise.ops.cluster import findings as cluster_findings
from shardwise.ops.cluster import preemption as cluster_preemption
from shardwise.ops.cluster.facts import OK, WARN
from shardwise.slurm import queries
from shardwise.slurm.queries import Answer, Preemption

#: sinfo -N of one node in two partitions of different tiers (captured shape).
NODES = "vm|main|up|infinite|gpu:2|idle|fakegpu|Unknown|none\nvm|urgent*|up|infinite|gpu:2|idle|fakegpu|Unknown|none\n"  # noqa: E501


def preempting(mode="REQUEUE", grace=0, *, config_mode="REQUEUE"):
    """Facts of a cluster where ``urgent`` (tier 10) preempts ``main`` (tier 1)."""
    config = {**facts().config.value, "PreemptType": "preempt/partition_prio"}
    config["PreemptMode"] = config_mode
    parts = {
        "main": Preemption(name="main", mode=mode, grace_seconds=grace, priority_tier=1),
        "urgent": Preemption(name="urgent", mode="OFF", grace_seconds=0, priority_tier=10),
    }
    return facts(
        config=Answer(config),
        nodes=Answer(queries.parse_nodes(NODES)),
        partition_preemption=Answer(parts),
    )


def main_request(**over):
    base = {
        "executor": "shardwise",
        "default-resources": {"slurm_account": "'proj'", "slurm_partition": "'main'"},
        "set-resources": {"classify": {"gpu": 1, "slurm_extra": "'--signal=TERM@120'"}},
        "shardwise-requeue": True,
    }
    return request(**{**base, **over})


def rows(req, found_facts):
    return [f for f in cluster_findings.findings(req, found_facts, 60) if f.check == "preemption"]


def test_without_preemption_one_row_says_jobs_run_to_their_end():
    (row,) = rows(request(), facts())
    assert (row.status, row.found) == (
        OK,
        "no preemption on this cluster (PreemptType=preempt/none): shard jobs run to their end",
    )


def test_a_requeueing_partition_below_another_tier_is_ok_and_says_slurm_requeues():
    (row,) = rows(main_request(), preempting("REQUEUE"))
    assert row.status == OK
    assert row.found == (
        "partition main: PreemptMode REQUEUE, PriorityTier 1 (urgent above it), GraceTime 0 s: "
        "SLURM requeues a preempted shard job (the same job), which resumes from its last "
        "finished file"
    )


def test_cancel_is_requeued_by_the_job_keeper():
    (row,) = rows(main_request(), preempting("CANCEL"))
    assert row.status == OK and "the workflow's job keeper requeues" in row.found


def test_the_top_tier_is_never_preempted():
    req = main_request(**{"default-resources": {"slurm_account": "'proj'",
                                                 "slurm_partition": "'urgent'"}})  # fmt: skip
    (row,) = rows(req, preempting())
    assert row.status == OK
    assert row.found.endswith("never preempted (no partition of a higher tier shares its nodes)")


def test_a_grace_longer_than_the_signal_lead_warns_and_the_overlay_lengthens_it():
    found_facts = preempting("CANCEL", grace=300)
    found = cluster_findings.findings(main_request(), found_facts, 60)
    (row,) = [f for f in found if f.check == "preemption"]
    assert row.status == WARN
    assert "--signal=TERM@120 is shorter than GraceTime" in row.why
    assert row.sets == (("slurm_extra", "'--signal=TERM@300'"),)
    values = cluster_check.overlay(main_request(), found_facts, found, 60)
    assert values["set-resources"]["classify"]["slurm_extra"] == "'--signal=TERM@300'"
    assert values["set-resources"]["classify"]["gpu"] == 1  # the mapping repeated in full


def test_a_profile_that_forbids_requeue_warns_and_the_overlay_allows_it():
    req = main_request(**{"shardwise-requeue": False, "shardwise-no-requeue": True})
    found_facts = preempting("REQUEUE")
    found = cluster_findings.findings(req, found_facts, 60)
    (row,) = [f for f in found if f.check == "preemption"]
    assert row.status == WARN and "every preemption spends a retry" in row.why
    values = cluster_check.overlay(req, found_facts, found, 60)
    assert (values["shardwise-requeue"], values["shardwise-no-requeue"]) == (True, False)
    header = cluster_check.overlay_header(["profiles/slurm"], found, values)
    assert "#   WARN preemption: partition main" in header


def test_suspend_holds_the_gpu_idle_and_warns():
    (row,) = rows(main_request(), preempting("SUSPEND,GANG"))
    assert row.status == WARN and "holds its GPU idle" in row.found


def test_qos_preemption_names_the_qos_that_may_preempt():
    config = {**facts().config.value, "PreemptType": "preempt/qos", "PreemptMode": "REQUEUE"}
    table = {
        "normal": Preemption(name="normal", mode="", grace_seconds=0),
        "high": Preemption(name="high", mode="", grace_seconds=0, preempts=("normal",)),
    }
    found_facts = facts(config=Answer(config), qos_preemption=Answer(table))
    (row,) = rows(main_request(), found_facts)
    assert row.status == OK
    assert row.found.startswith("QOS normal: PreemptMode REQUEUE (high may preempt it)")
    unknown = replace(found_facts, qos_preemption=Answer(None, "sacctmgr: no slurmdbd"))
    (row,) = rows(main_request(), unknown)
    assert row.status == WARN and "no slurmdbd" in row.found


def test_the_partition_table_parses_what_scontrol_prints():
    line = (
        "PartitionName=main AllowGroups=ALL Default=NO QoS=N/A GraceTime=60 Hidden=NO "
        "Nodes=vm PriorityJobFactor=1 PriorityTier=1 RootOnly=NO PreemptMode=CANCEL State=UP"
    )
    parsed = cluster_preemption.queries.command.key_values(line)
    assert (parsed["PreemptMode"], parsed["GraceTime"], parsed["PriorityTier"]) == (
        "CANCEL",
        "60",
        "1",
    )
