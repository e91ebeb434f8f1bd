"""Every pending reason the issue names gets a plain sentence and an action."""

import pytest

from shardwise.slurm.pending import explain


@pytest.mark.parametrize(
    ("reason", "starts_in", "never"),
    [
        ("Resources", "GPUs/CPUs/memory", False),
        ("Priority", "higher priority", False),
        ("ReqNodeNotAvail, Reserved for maintenance", "maintenance reservation", False),
        ("ReqNodeNotAvail, UnavailableNodes:gpu-bad01", "down, drained", False),
        ("ReqNodeNotAvail", "down, drained", False),
        (
            "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
            "partitions",
            "down, drained, busy until a reservation",
            False,
        ),
        ("QOSMaxSubmitJobPerUserLimit", "submitted per user", False),
        ("QOSMaxGRESPerUser", "GPU quota", False),
        ("QOSGrpGRES", "GPU quota", False),
        ("AssocGrpGRES", "GPU quota", False),
        ("AssocMaxJobsLimit", "running jobs", False),
        ("QOSMaxJobsPerUserLimit", "running jobs", False),
        ("PartitionTimeLimit", "MaxTime", True),
        ("BadConstraints", "features", True),
        ("JobHeldUser", "held by its owner", True),
        ("JobHeldAdmin", "administrator", True),
        ("Dependency", "another job", False),
        ("DependencyNeverSatisfied", "failed", True),
        ("AssocGrpCpuLimit", "limit of your account", False),
    ],
)
def test_each_named_reason_is_explained_with_an_action(reason, starts_in, never):
    e = explain(reason)
    assert e.known and starts_in in e.meaning and e.action, e
    assert e.never_starts is never
    assert e.reason == reason


def test_maintenance_advice_names_the_config_keys_that_shorten_walltime():
    action = explain("(ReqNodeNotAvail, Reserved for maintenance)").action
    assert "walltime.max_minutes" in action and "group-components" in action


def test_an_unknown_reason_is_shown_verbatim():
    e = explain("SomeSiteSpecificReason")
    assert (e.reason, e.known, e.never_starts) == ("SomeSiteSpecificReason", False, False)
    assert "shown as it is" in e.meaning
