"""The one SLURM command runner: timeouts, missing commands, and the reply parsers."""

from datetime import datetime

import pytest
from slurm_samples import SHOW_JOB

from shardwise.slurm import command


def test_a_missing_command_is_one_line_never_an_exception():
    reply = command.run(["shardwise-no-such-slurm-command", "-h"])
    assert (reply.ok, reply.kind, reply.returncode) == (False, "missing", None)
    assert reply.problem == (
        "`shardwise-no-such-slurm-command` is not installed or not on PATH "
        "(run this on a login node)"
    )


def test_a_command_that_hangs_is_cut_at_the_timeout():
    reply = command.run(["sleep", "30"], timeout=0.3)
    assert (reply.ok, reply.kind) == (False, "timeout")
    assert reply.problem == "`sleep 30` did not answer within 0.3 s"


def test_a_failing_command_reports_its_exit_code_and_message():
    reply = command.run(["sh", "-c", "echo 'sbatch: error: Invalid node name' >&2; exit 1"])
    assert (reply.ok, reply.kind, reply.returncode) == (False, "failed", 1)
    assert reply.problem.endswith("exited 1: sbatch: error: Invalid node name")


def test_permission_denied_is_reported_as_hidden_data():
    reply = command.run(["sh", "-c", "echo 'Access/permission denied' >&2; exit 1"])
    assert reply.kind == "hidden"


def test_rows_split_at_most_once_per_field_so_the_last_may_hold_the_separator():
    text = "12|RUNNING|a|b\n\n13|PENDING\n14|PENDING|ReqNodeNotAvail, Reserved|x\n"
    assert command.rows(text, ("id", "state", "rest")) == [
        {"id": "12", "state": "RUNNING", "rest": "a|b"},
        {"id": "14", "state": "PENDING", "rest": "ReqNodeNotAvail, Reserved|x"},
    ]


def test_key_values_keep_spaces_inside_values():
    kv = command.key_values(SHOW_JOB)
    assert kv["Partition"] == "ice-gpu,coe-gpu"
    assert kv["ExcNodeList"] == "gpu-bad01"
    assert kv["Comment"] == "rule_classify_classify"
    assert kv["TresPerJob"] == "gres:gpu:1"
    assert kv["Power"] == ""
    line = "JobId=5 Reason=ReqNodeNotAvail, Reserved for maintenance Dependency=(null)"
    assert command.key_values(line)["Reason"] == "ReqNodeNotAvail, Reserved for maintenance"


def test_config_values_read_scontrol_show_config():
    text = "Configuration data as of 2026\nMinJobAge               = 300 sec\nPrivateData = none\n"
    assert command.config_values(text) == {"MinJobAge": "300 sec", "PrivateData": "none"}


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("30", 30),
        ("20:00", 20),
        ("0:30", 1),
        ("1:00:00", 60),
        ("04:00:00", 240),
        ("1:00:01", 61),
        ("2-12:00:00", 3600),
        ("1-02", 1560),
        ("1-02:30", 1590),
        ("UNLIMITED", None),
        ("infinite", None),
        ("N/A", None),
        ("", None),
        ("abc", None),
    ],
)
def test_minutes_reads_every_slurm_duration_form(text, minutes):
    assert command.minutes(text) == minutes


def test_timestamps_and_counts_treat_slurm_nulls_as_none():
    assert command.timestamp("2026-12-01T06:17:22") == datetime(2026, 12, 1, 6, 17, 22)
    assert [command.timestamp(v) for v in ("Unknown", "N/A", "(null)", "soon")] == [None] * 4
    assert [command.count(v) for v in ("500", "", "UNLIMITED")] == [500, None, None]
