"""Typed SLURM answers: gres and TRES arithmetic, partitions from nodes."""

import pytest
from slurm_samples import SINFO_NODES

from shardwise.slurm import command, queries


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:2", 2),
        ("gpu:a100:4(S:0-1)", 4),
        ("gpu:a100:2,gpu:h100:2", 4),
        ("cpu=1,mem=1000M,node=1,billing=1,gres/gpu=2", 2),
        ("gres:gpu:1", 1),
        ("(null)", 0),
        ("", 0),
        ("shard:4", 0),
    ],
)
def test_gpu_count_reads_gres_and_tres_strings(gres, gpus):
    assert queries.gpu_count(gres) == gpus


def test_gpu_types_split_typed_tres_and_fall_back_to_gpu():
    assert queries.gpu_types("cpu=4,gres/gpu=2,gres/gpu:a100=2") == {"a100": 2}
    assert queries.gpu_types("cpu=1,gres/gpu=1") == {"gpu": 1}
    assert queries.gpu_types("cpu=1") == {}


def _nodes():
    return queries.parse_nodes(SINFO_NODES)


def test_sinfo_rows_become_nodes_with_reason_and_partition_flags():
    bad, _, vm, _ = _nodes()
    assert vm == queries.Node(
        name="vm",
        partition="ice-gpu",
        default_partition=True,
        partition_up=True,
        max_minutes=None,
        gres="gpu:2",
        state="drained",
        features=frozenset({"fakegpu"}),
        reason="fan broken",
        reason_time="2026-12-01T05:49:51",
    )
    assert (bad.gres, bad.reason, bad.reason_time, bad.gpus) == ("", "", "", 0)


def test_reservations_are_parsed_and_maintenance_is_flagged():
    from slurm_samples import RESERVATION

    (res,) = queries.parse_reservations("No reservations in the system\n" + RESERVATION)
    assert (res.name, res.maintenance, res.nodes, res.partition) == ("m2", True, "gpu-bad01,vm", "")
    assert (res.start.isoformat(), res.end.isoformat()) == (
        "2026-12-01T06:24:59",
        "2026-12-01T08:24:59",
    )
    assert queries.parse_reservations("No reservations in the system") == []


def test_partitions_sum_gpus_and_count_only_usable_nodes():
    parts = queries.partitions(_nodes())
    assert parts["ice-gpu"] == queries.Partition(
        name="ice-gpu",
        default=True,
        up=True,
        max_minutes=None,
        nodes=("gpu-bad01", "vm"),
        gpus=2,
        usable_gpus=0,
        features=frozenset({"fakegpu"}),
    )
    assert parts["coe-gpu"].max_minutes == 240
    assert not parts["coe-gpu"].default


@pytest.mark.parametrize(
    ("state", "usable"),
    [
        ("idle", True),
        ("mixed", True),
        ("allocated", True),
        ("down*", False),
        ("drained", False),
        ("draining", False),
        ("idle*", False),
        ("maint", False),
    ],
)
def test_a_node_is_usable_unless_down_drained_or_not_responding(state, usable):
    node = _nodes()[2]
    from dataclasses import replace

    assert replace(node, state=state).usable is usable


def test_private_data_and_min_job_age_are_read_from_the_config():
    cfg = {"PrivateData": "jobs,reservations", "MinJobAge": "300 sec"}
    assert queries.private_data(cfg) == {"jobs", "reservations"}
    assert queries.private_data({"PrivateData": "none"}) == frozenset()
    assert queries.min_job_age_seconds(cfg) == 300
    assert queries.accounting_enabled({"AccountingStorageType": "accounting_storage/none"}) is False
    assert queries.accounting_enabled({"AccountingStorageType": "accounting_storage/slurmdbd"})


@pytest.mark.parametrize(
    ("state", "free"),
    [
        ("idle", True),
        ("mixed", True),
        ("mixed~", True),
        ("idle+planned", True),
        ("planned", True),  # what sinfo %T says of an idle node held for a later job
        ("allocated", False),
        ("reserved", False),
        ("completing", False),
    ],
)
def test_idle_mixed_or_planned_nodes_have_free_resources(state, free):
    from dataclasses import replace

    assert replace(_nodes()[2], state=state).has_free_resources is free


def test_other_users_jobs_of_a_partition_are_read_from_one_squeue_call(monkeypatch):
    calls = []

    def run(argv, *, timeout):
        calls.append(list(argv))
        return command.Reply(
            argv=tuple(argv), stdout="12|PENDING|ann|gpu\n13|RUNNING|bob|gpu,cpu\n"
        )

    monkeypatch.setattr(queries.command, "run", run)
    found = queries.partition_jobs(["gpu", "cpu"])
    assert calls == [["squeue", "-h", "-t", "PD,R", "-p", "gpu,cpu", "-o", "%i|%T|%u|%P"]]
    assert [(j.id, j.state, j.user, j.partition) for j in found.value] == [
        ("12", "PENDING", "ann", "gpu"),
        ("13", "RUNNING", "bob", "gpu,cpu"),
    ]


def test_a_refused_squeue_is_an_answer_with_the_problem(monkeypatch):
    def run(argv, *, timeout):
        return command.Reply(
            argv=tuple(argv), returncode=1, problem="`squeue` exited 1", kind="failed"
        )

    monkeypatch.setattr(queries.command, "run", run)
    assert queries.partition_jobs(["gpu"]) == queries.Answer(None, "`squeue` exited 1", "failed")
    assert queries.sacct_answers("me") == queries.Answer(None, "`squeue` exited 1", "failed")
