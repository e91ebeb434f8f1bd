"""`cluster check` findings, from what SLURM said (captured values) and a profile."""

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import jsonschema
import pytest
from slurm_samples import RESERVATION, SINFO_NODES

from shardwise.ops.cluster import check as cluster_check
from shardwise.ops.cluster import facts as cluster_facts
from shardwise.ops.cluster import findings as cluster_findings
from shardwise.ops.cluster.facts import FAIL, OK, WARN
from shardwise.slurm import profile, queries
from shardwise.slurm.queries import Answer

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 1, 6, 0)
HEALTHY_NODES = SINFO_NODES.replace("drained", "idle").replace("fan broken", "none")


def facts(**over):
    base = dict(
        user="me",
        now=NOW,
        config=Answer(
            {
                "ClusterName": "test",
                "MinJobAge": "300 sec",
                "AccountingStorageType": "accounting_storage/slurmdbd",
                "AccountingStorageEnforce": "associations,limits,qos",
                "PrivateData": "none",
            }
        ),
        nodes=Answer(queries.parse_nodes(HEALTHY_NODES)),
        limits=Answer(
            queries.Limits(
                (
                    queries.Association(
                        account="proj",
                        partition="",
                        qos=("normal", "cap2"),
                        default_qos="normal",
                        max_submit_jobs=None,
                    ),
                ),
                {
                    "normal": queries.Qos("normal", None),
                    "cap2": queries.Qos("cap2", 2),
                },
                "proj",
            )
        ),
        reservations=Answer([]),
        queue=Answer([]),
        sacct_installed=True,
    )
    base.update(over)
    return cluster_facts.CheckFacts(**base)


def request(**over):
    merged = {
        "executor": "shardwise",
        "jobs": 4,
        "group-components": {"classify": 2},
        "default-resources": {"slurm_account": "'proj'", "slurm_partition": "'ice-gpu'"},
        "set-resources": {"classify": {"gpu": 1}},
        "shardwise-status-command": "squeue",
        "shardwise-init-seconds-before-status-checks": 40,
        "shardwise-exclude-failed-nodes": "gpu-bad01",
    }
    merged.update(over)
    return profile.view(merged, {}, {})


def by_check(found):
    out = {}
    for f in found:
        out.setdefault(f.check, []).append(f)
    return out


def test_a_fitting_profile_is_all_ok():
    found = cluster_findings.findings(request(), facts(), max_minutes=60)
    assert cluster_facts.overall(found) == OK, found
    checks = [f.check for f in found]
    assert checks == [
        "controller",
        "executor",
        "account",
        "jobs",
        "status_command",
        "partition",
        "exclude",
        "node",
        "reservations",
        "preemption",
    ]


def test_jobs_above_the_qos_submit_cap_fails_with_the_fix():
    found = by_check(
        cluster_findings.findings(request(jobs=5, **{"shardwise-qos": "cap2"}), facts(), 60)
    )
    (jobs,) = found["jobs"]
    assert jobs == cluster_facts.CheckResult(
        check="jobs",
        status=FAIL,
        found="jobs 5 is above the submit cap 2 (QOS cap2 MaxSubmitJobsPerUser); 0 of your jobs "
        "are queued now",
        why="above the cap sbatch is refused (QOSMaxSubmitJobPerUserLimit) and Snakemake fails "
        "the job at once, burning a retry",
        fix="jobs: 1",
    )


def test_less_than_ten_percent_headroom_warns_and_association_caps_count():
    lim = queries.Limits(
        (
            queries.Association(
                account="proj",
                partition="",
                qos=("normal",),
                default_qos="normal",
                max_submit_jobs=500,
            ),
        ),
        {"normal": queries.Qos("normal", None)},
        "proj",
    )
    (jobs,) = by_check(cluster_findings.findings(request(jobs=460), facts(limits=Answer(lim)), 60))[
        "jobs"
    ]
    assert (jobs.status, jobs.fix) == (WARN, "jobs: 450")
    assert "association proj MaxSubmitJobs" in jobs.found
    (jobs,) = by_check(cluster_findings.findings(request(jobs=450), facts(limits=Answer(lim)), 60))[
        "jobs"
    ]
    assert jobs.status == OK


def test_without_accounting_sacct_would_hang_and_the_cap_is_unknown():
    off = facts(
        config=Answer({"MinJobAge": "300 sec", "AccountingStorageType": "accounting_storage/none"}),
        limits=Answer(None, "accounting is off", "failed"),
    )
    found = by_check(
        cluster_findings.findings(request(**{"shardwise-status-command": "sacct"}), off, 60)
    )
    (status,) = found["status_command"]
    assert status.status == FAIL and "sacct would hang" in status.found
    assert status.fix == "shardwise-status-command: squeue"
    assert found["jobs"][0].status == WARN and "cap is unknown" in found["jobs"][0].found


def test_squeue_needs_min_job_age_over_three_polls_and_180_s():
    short = facts(config=Answer({"MinJobAge": "100 sec", "AccountingStorageType": "x/slurmdbd"}))
    (status,) = by_check(cluster_findings.findings(request(), short, 60))["status_command"]
    assert status.status == FAIL
    assert status.found.startswith("shardwise-status-command squeue, MinJobAge 100 s < 181 s")
    assert status.fix == "shardwise-status-command: sacct"


def test_an_unknown_excluded_node_fails_naming_it_and_the_overlay_drops_it():
    req = request(**{"shardwise-exclude-failed-nodes": "gpu-bad01,nosuchnode"})
    f = facts()
    found = cluster_findings.findings(req, f, 60)
    (ex,) = by_check(found)["exclude"]
    assert ex.status == FAIL and "nosuchnode" in ex.found and "gpu-bad01" not in ex.found
    assert "Invalid node name specified" in ex.why
    assert cluster_check.overlay(req, f, found, 60) == {
        "shardwise-exclude-failed-nodes": "gpu-bad01"
    }


def test_missing_partition_short_maxtime_and_missing_feature_fail_with_fixes():
    req = request(
        **{
            "default-resources": {"slurm_account": "'proj'", "slurm_partition": "'nope'"},
            "set-resources": {"classify": {"gpu": 1, "constraint": "'A100'"}},
        }
    )
    found = by_check(cluster_findings.findings(req, facts(), 60))
    (part,) = found["partition"]
    assert (part.status, part.found) == (
        FAIL,
        "partition nope (default-resources slurm_partition) does not exist",
    )
    assert part.fix == "partitions with GPUs here: ice-gpu,coe-gpu"
    req = request(
        **{"default-resources": {"slurm_account": "'proj'", "slurm_partition": "'coe-gpu'"}}
    )
    (part,) = by_check(cluster_findings.findings(req, facts(), 180))["partition"]
    assert part.status == FAIL
    assert "MaxTime 240 min < K x walltime.max_minutes = 2 x 180 = 360 min" in part.found
    assert part.fix == "walltime.max_minutes: 120, or --group-components classify=1"
    req = request(
        set_resources_unused=None, **{"set-resources": {"classify": {"constraint": "'A100'"}}}
    )
    (con,) = by_check(cluster_findings.findings(req, facts(), 60))["constraint"]
    assert (
        con.status == FAIL
        and con.found == "constraint A100: A100 exist on no node of the partitions"
    )
    assert con.fix.startswith("drop it or use one of: fakegpu")
    req = request(**{"set-resources": {"classify": {"constraint": "'A100|fakegpu'"}}})
    (con,) = by_check(cluster_findings.findings(req, facts(), 60))["constraint"]
    assert con.status == WARN


def test_in_a_partition_list_one_bad_partition_only_warns():
    req = request(
        **{"default-resources": {"slurm_account": "'proj'", "slurm_partition": "'ice-gpu,nope'"}}
    )
    found = by_check(cluster_findings.findings(req, facts(), 60))["partition"]
    assert [f.status for f in found] == [OK, WARN]


def test_an_unset_account_variable_fails_with_the_users_default_account():
    req = request(**{"default-resources": {"slurm_account": "'${SHARDWISE_SLURM_ACCOUNT}'"}})
    (acc,) = by_check(cluster_findings.findings(req, facts(), 60))["account"]
    assert (acc.status, acc.found) == (FAIL, "$SHARDWISE_SLURM_ACCOUNT is not set")
    assert acc.fix == "export SHARDWISE_SLURM_ACCOUNT=proj (yours: proj)"


def test_a_drained_node_shows_with_its_reason():
    drained = facts(nodes=Answer(queries.parse_nodes(SINFO_NODES)))
    found = by_check(cluster_findings.findings(request(), drained, 60))
    nodes = {f.found.split()[1]: f for f in found["node"]}
    assert nodes["vm"].status == WARN
    assert "drained" in nodes["vm"].found and "reason: fan broken" in nodes["vm"].found
    assert found["gpus"][0].status == WARN


def test_a_maintenance_window_shorter_than_the_longest_job_warns_with_the_walltime_fix():
    res = Answer(queries.parse_reservations(RESERVATION))  # starts 06:24:59, now 06:00
    (r,) = by_check(cluster_findings.findings(request(), facts(reservations=res), 60))[
        "reservations"
    ]
    assert r.status == WARN
    assert r.found == "maintenance m2 from 2026-12-01 06:24 (in 24 min) to 2026-12-01 08:24"
    assert r.fix == "walltime.max_minutes: 12 until the window (or wait for it to pass)"


def test_hidden_reservations_are_said_to_be_hidden():
    private = facts(
        config=Answer(
            {
                "MinJobAge": "300 sec",
                "AccountingStorageType": "x/slurmdbd",
                "PrivateData": "reservations",
            }
        )
    )
    (r,) = by_check(cluster_findings.findings(request(), private, 60))["reservations"]
    assert r.status == WARN and "hidden from you (PrivateData=reservations)" in r.found


def test_the_json_document_follows_the_documented_schema():
    req = request(jobs=5, **{"shardwise-exclude-failed-nodes": "nosuchnode"})
    f = facts()
    found = cluster_findings.findings(req, f, 60)
    values = cluster_check.overlay(req, f, found, 60)
    doc = cluster_check.CheckRun(
        request=req,
        found=found,
        profiles=["profiles/slurm"],
        configfile=None,
        user="me",
        max_minutes=60,
        overlay_values=values,
        overlay_path="/tmp/site/config.yaml",
    ).to_dict()
    schema = json.loads((REPO / "docs/schemas/cluster-check.schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(doc)), schema)
    assert doc["status"] == FAIL
    assert values == {"shardwise-exclude-failed-nodes": ""}


@pytest.mark.parametrize("bad", ["jobs", "status"])
def test_the_overlay_header_lists_what_it_fixes_and_what_it_cannot(bad):
    found = [
        cluster_facts.CheckResult(
            check="jobs", status=FAIL, found="jobs 5 above 2", why="", fix="jobs: 1"
        ),
        cluster_facts.CheckResult(
            check="node", status=WARN, found="node vm drained", why="", fix=""
        ),
    ]
    text = cluster_check.overlay_header(
        ["profiles/slurm"], found, {"jobs": 1} if bad == "jobs" else {}
    )
    assert text.startswith("# Site overlay written by `shardwise cluster check --write-profile`.")
    assert ("#   FAIL jobs: jobs 5 above 2" in text.split("# Not fixable")[0]) is (bad == "jobs")
    assert "#   WARN node: node vm drained" in text.split("# Not fixable")[1]


def test_the_status_command_defaults_to_the_plugins_choice():
    req = replace(request(), status_command=None)
    assert cluster_facts.status_command(req, facts()) == "sacct"
    assert cluster_facts.status_command(req, facts(sacct_installed=False)) == "squeue"


def test_the_account_is_a_warning_where_the_cluster_does_not_enforce_associations():
    req = request(**{"default-resources": {}})
    loose = {"AccountingStorageType": "accounting_storage/slurmdbd",
             "AccountingStorageEnforce": "none", "MinJobAge": "300 sec"}  # fmt: skip
    (acc,) = by_check(cluster_findings.findings(req, facts(config=Answer(loose)), 60))["account"]
    assert (acc.status, acc.found) == (WARN, "the profile names no slurm_account")
    assert "does not enforce associations" in acc.why and "jobs run without one" in acc.why
    (strict,) = by_check(cluster_findings.findings(req, facts(), 60))["account"]
    assert strict.status == FAIL and "every sbatch is refused" in strict.why


def test_hidden_reservations_say_what_status_will_do():
    hidden = {
        "AccountingStorageType": "x/slurmdbd",
        "AccountingStorageEnforce": "associations",
        "PrivateData": "accounts,jobs,reservations,usage,users",
        "MinJobAge": "300 sec",
    }
    found = cluster_findings.findings(request(), facts(config=Answer(hidden)), 60)
    (res,) = by_check(found)["reservations"]
    assert res.status == WARN and "hidden from you (PrivateData=reservations)" in res.found
    assert "`shardwise cluster status` locates the hidden window" in res.why
    assert "`shardwise cluster retime`" in res.why


def test_the_executor_row_fails_on_options_the_executor_never_reads():
    plain = {k: v for k, v in request().raw.items() if not k.startswith("shardwise-")}
    req = profile.view({**plain, "executor": "slurm", "shardwise-requeue": True}, {}, {})
    (row,) = by_check(cluster_findings.findings(req, facts(), 60))["executor"]
    assert (row.status, row.found) == ("FAIL", "executor slurm never reads shardwise-requeue")
    assert row.fix == "spell them slurm-requeue"


def test_the_slurm_spelling_is_read_under_shardwise_and_two_values_fail():
    """``executor: shardwise`` reads ``slurm-<name>`` with the same meaning (the executor
    plugin's ``read_slurm_spelling``); both spellings with different values fail."""
    plain = {k: v for k, v in request().raw.items() if k != "shardwise-status-command"}
    req = profile.view({**plain, "slurm-status-command": "squeue"}, {}, {})
    assert req.status_command == "squeue"
    (row,) = by_check(cluster_findings.findings(req, facts(), 60))["executor"]
    assert row.status == "OK"
    twice = request(**{"slurm-requeue": False, "shardwise-requeue": True})
    (row,) = by_check(cluster_findings.findings(twice, facts(), 60))["executor"]
    assert (row.status, row.found) == ("FAIL", "slurm-requeue: False, shardwise-requeue: True")


def test_the_executor_row_warns_when_no_job_keeper_can_attach():
    plain = {k.replace("shardwise-", "slurm-"): v for k, v in request().raw.items()}
    req = profile.view({**plain, "executor": "slurm"}, {}, {})
    assert req.status_command == "squeue"  # read under the executor's own prefix
    (row,) = by_check(cluster_findings.findings(req, facts(), 60))["executor"]
    assert (row.status, row.found) == ("WARN", "executor slurm")
    assert "waited for forever" in row.why
    (ok,) = by_check(cluster_findings.findings(request(), facts(), 60))["executor"]
    assert (ok.status, ok.found) == (
        "OK",
        "executor shardwise: the SLURM plugin with the job keeper",
    )
