"""`cluster status`: the run's jobs, reasons, the walltime probe and the view, from values."""

import io
import json
import os
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import jsonschema
from e2e import minimal_config
from slurm_samples import RESERVATION, SHOW_JOB, SINFO_NODES, WRAP_SCRIPT, job

from shardwise.demo.corpus import DemoSize, write_corpus
from shardwise.ops.cluster import asking
from shardwise.ops.cluster import render as cluster_status_format
from shardwise.ops.cluster import status as cluster_status
from shardwise.ops.walltime import probe as walltime_probe
from shardwise.ops.walltime import rows as walltime_rows
from shardwise.planner import inflight
from shardwise.run import adaptation, claims, markers
from shardwise.slurm import command, queries
from shardwise.slurm.queries import Answer
from shardwise.snakefile import prepare_run

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 1, 6, 0)
WINDOW = datetime(2026, 12, 1, 6, 19)  # a maintenance window 19 minutes away
AFTER = datetime(2026, 12, 1, 8, 19)


def test_probe_limits_are_own_half_quarter_and_one_shards_share():
    assert walltime_probe.probe_minutes(240, 2) == [240, 120, 60]
    assert walltime_probe.probe_minutes(240, 8) == [240, 120, 60, 30]
    assert walltime_probe.probe_minutes(3, 1) == [3, 1]
    assert walltime_probe.probe_minutes(None, 2) == []


def test_test_only_repeats_the_pending_jobs_request():
    detail = command.key_values(SHOW_JOB)
    assert walltime_probe.test_only_options(detail, 30) == [
        "-t",
        "30",
        "-p",
        "ice-gpu,coe-gpu",
        "-A",
        "shardwise",
        "--qos",
        "normal",
        "-C",
        "fakegpu",
        "--exclude",
        "gpu-bad01",
        "--cpus-per-task=2",
        "--mem=1000M",
        "--gpus=1",
    ]


def _window(minutes):
    """SLURM's answer with a maintenance window: what ends before it starts now."""
    return Answer(NOW if NOW + timedelta(minutes=minutes) <= WINDOW else AFTER)


def test_the_longest_limit_that_starts_now_is_found_by_bisection():
    asked = []

    def ask(minutes):
        asked.append(minutes)
        return _window(minutes)

    # none of 60, 30 starts now: halve below, then bisect
    assert walltime_probe.longest_starting_now(ask, [60, 30], NOW) == 19
    assert len(asked) <= 10
    # 15 starts now, 30 does not: bisect between them
    asked.clear()
    assert walltime_probe.longest_starting_now(ask, [60, 30, 15], NOW) == 19
    assert len(asked) <= 8
    assert walltime_probe.longest_starting_now(lambda m: Answer(AFTER), [60], NOW) is None
    assert walltime_probe.longest_starting_now(lambda m: Answer(NOW), [60], NOW) is None


def _run(tmp_path):
    write_corpus(tmp_path / "corpus", DemoSize(files_per_category=1, docs_per_file=2))
    cfg = minimal_config(tmp_path, tmp_path / "corpus", sharding={"total_shards": 8})
    submitter = inflight.Submitter(
        workdir="/work",
        snakefile="/repo/Snakefile",
        configfiles=("/work/demo/config.yaml",),
        host="login1",
        pid=4242,
        started_at="2026-12-01T05:50:00+00:00",
    )
    prepare_run(cfg, main_process=True, dryrun=True, out=io.StringIO(), submitter=submitter)
    return tmp_path / "run"


def _job(job_id, state, reason, **kw):
    base = {
        "partition": "ice-gpu,coe-gpu",
        "time_limit_minutes": 240,
        "submit_time": datetime(2026, 12, 1, 5, 55),
        "tres_alloc": "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=1",
        "account": "shardwise",
        "reason": reason,
    }
    return job(job_id, state, **{**base, **kw})


#: The sample pending job once SLURM's backfill pass has planned it.
PLANNED_JOB = SHOW_JOB.replace("Scheduler=Main", "Scheduler=Backfill")


def _facts(run_dir):
    queue = [
        _job("20", "PENDING", "ReqNodeNotAvail, Reserved for maintenance"),
        _job(
            "19",
            "RUNNING",
            "",
            partition="ice-gpu",
            start_time=datetime(2026, 12, 1, 5, 56),
            nodes="vm",
            tres_alloc="cpu=1,gres/gpu:a100=1",
        ),
        _job("30", "PENDING", "Priority", workdir="/another/workflow"),
    ]
    cache = {
        "20@2026-12-01T05:55:00": inflight.parse_wrap(WRAP_SCRIPT),
        "19@2026-12-01T05:55:00": replace(inflight.parse_wrap(WRAP_SCRIPT), shards=(0, 1)),
    }
    body = {key: entry.to_json() for key, entry in cache.items()}
    (run_dir / "claims" / claims.JOBS_CACHE).write_text(json.dumps(body))
    starts = {m: _window(m) for m in (240, 120, 60, 19)}
    return asking.StatusFacts(
        user="me",
        now=NOW,
        queue=Answer(queue),
        config=Answer({"PrivateData": "none", "AccountingStorageType": "x/slurmdbd"}),
        nodes=Answer(queries.parse_nodes(SINFO_NODES)),
        limits=Answer(
            queries.Limits(
                (
                    queries.Association(
                        account="shardwise",
                        partition="",
                        qos=("normal",),
                        default_qos="normal",
                        max_submit_jobs=None,
                    ),
                ),
                {"normal": queries.Qos("normal", 500)},
                "shardwise",
            )
        ),
        others=Answer([_job("99", "PENDING", "Priority", user="them")]),
        probe_detail=Answer(command.key_values(PLANNED_JOB)),
        probe_starts=starts,
    )


def test_the_view_groups_reasons_and_answers_the_walltime_question(tmp_path):
    run_dir = _run(tmp_path)
    status = cluster_status.build(run_dir, _facts(run_dir))
    assert [(j.id, j.state, j.shards) for j in status.jobs] == [
        ("19", "RUNNING", (0, 1)),
        ("20", "PENDING", (6, 7)),
    ]
    assert (status.user_jobs, status.submit_cap) == (3, 500)
    (group,) = status.pending
    assert group["reason"] == "ReqNodeNotAvail, Reserved for maintenance"
    assert group["jobs"] == ["20"] and group["shards"] == 2
    assert "maintenance reservation" in group["meaning"]
    probe = status.probe
    assert probe.job_id == "20"
    assert [(r.minutes, r.label, r.starts_now) for r in probe.rows] == [
        (240, "its own request", False),
        (120, "one shard's share", False),
        (60, "a quarter of it", False),
        (19, "longest that starts now", True),
    ]
    assert probe.advice.startswith(
        "a job asking for 19 min or less starts now instead of 2026-12-01 08:19:00"
    )
    assert "walltime.max_minutes: 9 (K=2)" in probe.advice
    assert status.progress.gpus_running == 1
    assert status.main_process == {
        "host": "login1",
        "pid": 4242,
        "alive": None,
        "since": inflight.local_time("2026-12-01T05:50:00+00:00"),
    }
    assert [n["node"] for n in status.nodes] == ["gpu-bad01", "vm"]
    assert status.others == {"pending": 1, "running": 0}
    text = cluster_status_format.format_table(status)
    assert "ice-gpu a100 x1" in text
    assert "19 min  (longest that starts now)  expected start: now" in text
    assert "vm           drained    reason: fan broken since 2026-12-01T05:49:51" in text


def test_the_json_document_follows_the_documented_schema(tmp_path):
    run_dir = _run(tmp_path)
    with claims.held(run_dir, 3):
        doc = cluster_status_format.to_dict(cluster_status.build(run_dir, _facts(run_dir)))
    schema = json.loads((REPO / "docs/schemas/cluster-status.schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(doc)), schema)
    assert doc["counts"] == {"running": 1, "pending": 1, "gpus_in_use": 1}
    assert doc["gpus_in_use"] == [
        {"partition": "ice-gpu", "qos": "normal", "type": "a100", "gpus": 1}
    ]
    done = markers.done_shards(run_dir)  # empty shards are marked done at plan time
    assert sorted(f["shard"] for f in doc["in_flight"]) == sorted({0, 1, 3, 6, 7} - done)


def test_private_jobs_are_said_to_be_hidden_instead_of_guessed(tmp_path):
    run_dir = _run(tmp_path)
    facts = replace(_facts(run_dir), config=Answer({"PrivateData": "jobs,usage"}), others=None)
    status = cluster_status.build(run_dir, facts)
    assert status.others is None
    assert any("hidden (PrivateData=jobs)" in n for n in status.notes)


def test_a_shorter_walltime_that_starts_earlier_but_not_now_is_advised():
    rows = [
        walltime_rows.ProbeRow(
            minutes=23, label="its own request", start="2026-12-01T10:44:11", starts_now=False
        ),
        walltime_rows.ProbeRow(
            minutes=12, label="one shard's share", start="2026-12-01T06:34:16", starts_now=False
        ),
        walltime_rows.ProbeRow(
            minutes=11, label="half of it", start="2026-12-01T06:34:16", starts_now=False
        ),
    ]
    priority = _job("20", "PENDING", "Priority", time_limit_minutes=23)
    common = {"own": 23, "shards": 2, "hidden": None, "run_dir": "/r"}
    advice = walltime_rows._advice(rows, job=priority, **common)
    assert advice.startswith(
        "a job asking for 12 min or less starts at 2026-12-01 06:34:16 instead of "
        "2026-12-01 10:44:11"
    )
    assert "`shardwise cluster retime --run-dir /r --max-minutes 12`" in advice
    same = [replace(r, start="2026-12-01T10:44:11") for r in rows]
    assert walltime_rows._advice(same, job=priority, **common).startswith(
        "no shorter walltime starts"
    )
    # a job waiting for a reservation is never told that its wait is not about time
    reserved = replace(priority, reason="ReqNodeNotAvail, Reserved for maintenance")
    said = walltime_rows._advice(same, job=reserved, **common)
    assert "not about time" not in said
    assert said.startswith("the job waits for a reservation (ReqNodeNotAvail, Reserved for")


#: The same cluster with a node idle in each of the job's partitions.
IDLE_NODES = SINFO_NODES + (
    "gpu01|ice-gpu*|up|infinite|gpu:4|idle|fakegpu|Unknown|none\n"
    "gpu01|coe-gpu|up|4:00:00|gpu:4|idle|fakegpu|Unknown|none\n"
)


def _behind_own_jobs(run_dir, nodes=IDLE_NODES, reservations=RESERVATION):
    """sbatch --test-only queues its test behind the run's pending jobs: all say later."""
    return replace(
        _facts(run_dir),
        nodes=Answer(queries.parse_nodes(nodes)),
        probe_starts={m: Answer(AFTER) for m in (240, 120, 60, 30, 15, 7, 3, 1)},
        reservations=Answer(queries.parse_reservations(reservations)),
    )


def test_a_visible_window_gives_the_limit_that_ends_before_it_when_test_only_cannot(tmp_path):
    run_dir = _run(tmp_path)
    status = cluster_status.build(run_dir, _behind_own_jobs(run_dir))
    rows = {r.label: r for r in status.probe.rows}
    window = rows[walltime_rows.WINDOW_LABEL]
    # m2 starts 24 min 59 s after NOW: 24 whole minutes, one kept to schedule the job
    assert (window.minutes, window.starts_now) == (23, True)
    assert window.source == "reservation m2 from 2026-12-01 06:24"
    assert rows["its own request"].starts_now is False
    advice = status.probe.advice
    assert advice.startswith("a job asking for 23 min or less starts now instead of")
    assert "the pending jobs ahead in the partition, this run's own included" in advice
    assert "walltime.max_minutes: 11 (K=2)" in advice
    text = cluster_status_format.format_table(status)
    assert "23 min  (ends before the window )  expected start: now  [reservation m2" in text
    doc = cluster_status_format.to_dict(status)
    schema = json.loads((REPO / "docs/schemas/cluster-status.schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(doc)), schema)
    sources = {r["source"] for r in doc["walltime_probe"]["rows"]}
    assert sources == {"sbatch --test-only", "reservation m2 from 2026-12-01 06:24"}


def test_the_window_row_does_not_claim_now_without_an_idle_node(tmp_path):
    run_dir = _run(tmp_path)
    status = cluster_status.build(run_dir, _behind_own_jobs(run_dir, nodes=SINFO_NODES))
    window = next(r for r in status.probe.rows if r.label == walltime_rows.WINDOW_LABEL)
    assert (window.minutes, window.start, window.starts_now) == (23, None, None)
    assert "no idle node" in window.problem
    assert status.probe.advice.startswith("the job waits for a reservation")
    assert "not about time" not in status.probe.advice


def test_no_window_row_for_another_partitions_or_a_past_window(tmp_path):
    run_dir = _run(tmp_path)
    other = RESERVATION.replace("PartitionName=(null)", "PartitionName=cpu")
    past = RESERVATION.replace("2026-12-01T06:24:59", "2026-12-01T05:30:00")
    for text in (other, past, ""):
        status = cluster_status.build(run_dir, _behind_own_jobs(run_dir, reservations=text))
        assert walltime_rows.WINDOW_LABEL not in {r.label for r in status.probe.rows}, text


def test_a_hidden_window_is_located_blind_and_the_advice_names_retime(tmp_path):
    """PrivateData=reservations: no window visible, the pending reason names one; small
    test jobs start now up to 29 min: the window starts about 29 min from now."""
    run_dir = _run(tmp_path)
    facts = replace(
        _behind_own_jobs(run_dir),
        reservations=Answer(None, "reservations are hidden (PrivateData)", "hidden"),
        hidden_window=Answer(_located(29, walltime_probe.Method.INFERRED)),
    )
    status = cluster_status.build(run_dir, facts)
    window = next(r for r in status.probe.rows if r.label == walltime_rows.WINDOW_LABEL)
    assert (window.minutes, window.starts_now) == (28, True)
    assert window.source == (
        "inferred: sbatch --test-only starts a small job ending before 06:29 earlier than one "
        "ending after it; reservations are hidden from you"
    )
    assert status.probe.located.method is walltime_probe.Method.INFERRED
    advice = status.probe.advice
    assert advice.startswith(f"a maintenance window starts at about {window.window_start} (")
    assert "a job asking for 28 min or less starts now" in advice
    assert f"`shardwise cluster retime --run-dir {run_dir} --max-minutes 28`" in advice
    assert "not about time" not in advice
    schema = json.loads((REPO / "docs/schemas/cluster-status.schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(cluster_status_format.to_dict(status))), schema)


def _located(minutes, method):
    start = (NOW + timedelta(minutes=minutes)).isoformat(timespec="seconds")
    return walltime_probe.Located(
        minutes=minutes, start=start, method=method, calls=9, seconds=1.5, changed="nothing"
    )


def test_a_window_located_with_real_allocations_says_so_and_what_it_submitted(tmp_path):
    run_dir = _run(tmp_path)
    changed = "7 job(s) of 1 CPU named shardwise-window-probe (salloc --immediate=1): ..."
    located = replace(_located(40, walltime_probe.Method.ALLOCATED), changed=changed)
    facts = replace(_behind_own_jobs(run_dir), hidden_window=Answer(located),
                    reservations=Answer(None, "hidden", "hidden"))  # fmt: skip
    status = cluster_status.build(run_dir, facts)
    window = next(r for r in status.probe.rows if r.label == walltime_rows.WINDOW_LABEL)
    assert (window.minutes, window.method) == (39, walltime_probe.Method.ALLOCATED)
    assert window.source.startswith("inferred: a 1-CPU job ending before 06:40 was allocated")
    doc = json.loads(json.dumps(cluster_status_format.to_dict(status)))
    assert doc["walltime_probe"]["located"] == {
        "minutes": 40, "start": "2026-12-01T06:40:00", "method": "allocated", "calls": 9,
        "seconds": 1.5, "changed": changed,
    }  # fmt: skip
    schema = json.loads((REPO / "docs/schemas/cluster-status.schema.json").read_text())
    jsonschema.validate(doc, schema)
    text = cluster_status_format.format_table(status)
    assert "window located with 1-CPU allocations: 9 SLURM call(s) in 1.5 s" in text
    assert f"submitted: {changed}" in text


def _delayed(delay_minutes, window_end):
    """sbatch --test-only of a small job under SLURM's delay for the jobs ahead: the
    delay is added to every answer; past the window (19 min away) it starts at its end."""

    def ask(minutes):
        start = NOW + timedelta(minutes=delay_minutes)
        return Answer(start if minutes <= 19 else max(start, window_end))

    return ask


def test_the_window_is_where_test_only_answers_step_whatever_delay_it_adds():
    for delay in (0, 30, 100):
        step, base = walltime_probe.step_limit(_delayed(delay, AFTER), [240, 120, 60])
        assert step == 19, delay
        assert base.value == NOW + timedelta(minutes=delay)
    # a delay that ends after the window hides it: no step, and the caller must not guess
    assert walltime_probe.step_limit(_delayed(540, AFTER), [240, 120])[0] is None
    # no window at all: no step
    assert walltime_probe.step_limit(lambda m: Answer(NOW), [240, 120])[0] is None


def test_a_hidden_window_that_cannot_be_located_says_why(tmp_path):
    run_dir = _run(tmp_path)
    facts = replace(
        _behind_own_jobs(run_dir),
        reservations=Answer(None, "hidden", "hidden"),
        hidden_window=Answer(None, "no small test job starts now at any limit", "failed"),
        probe_starts={},
    )
    status = cluster_status.build(run_dir, facts)
    assert status.probe is None or "not about time" not in status.probe.advice


def test_the_small_test_job_repeats_where_the_job_would_run_but_asks_for_almost_nothing():
    detail = {"Partition": "ice-gpu,coe-gpu", "Account": "proj", "QOS": "normal",
              "Features": "fakegpu", "ExcNodeList": "(null)", "TresPerJob": "gres:gpu:1",
              "MinMemoryNode": "8G"}  # fmt: skip
    opts = walltime_probe.window_options(detail, 29)
    assert opts == ["-t", "29", "-n", "1", "--cpus-per-task=1", "--mem=1", "-p",
                    "ice-gpu,coe-gpu", "-A", "proj", "--qos", "normal",
                    "-C", "fakegpu"]  # fmt: skip
    assert walltime_probe.waits_for_reservation("ReqNodeNotAvail, Reserved for maintenance")
    assert not walltime_probe.waits_for_reservation("Priority")


def test_the_probed_job_is_the_oldest_that_waits_for_a_reservation():
    first = job("5", reason="Priority", submit_time=datetime(2026, 12, 1, 5, 0))
    later = job("6", reason="ReqNodeNotAvail, Reserved for maintenance")
    running = job("4", "RUNNING", submit_time=datetime(2026, 12, 1, 4, 0))
    mine = {j.id: (j, (0,)) for j in (first, later, running)}
    assert asking.probed_job(mine) is later  # SLURM left the oldest at Priority
    assert asking.probed_job({"5": (first, (0,))}) is first
    assert asking.probed_job({"4": (running, (0,))}) is None


def test_answers_before_the_first_backfill_pass_are_called_provisional(tmp_path):
    run_dir = _run(tmp_path)
    facts = replace(_facts(run_dir), probe_detail=Answer(command.key_values(SHOW_JOB)))
    advice = cluster_status.build(run_dir, facts).probe.advice
    assert advice.startswith("SLURM has not planned job 20 yet (")
    assert "ask again in a minute" in advice
    assert walltime_probe.planned(command.key_values(PLANNED_JOB))
    assert walltime_probe.planned(None)  # nothing known: nothing to warn about


def test_the_workflows_fit_in_force_is_the_answer_and_no_probe_is_made(tmp_path):
    """While the live workflow's walltime fit is in force, ``cluster status`` shows that
    fit and its evidence instead of probing SLURM's plan a second time (#48)."""
    from shardwise.run import adaptation

    run_dir = _run(tmp_path)
    now = datetime.now()
    fit = adaptation.Fit(
        horizon=(now + timedelta(minutes=40)).isoformat(timespec="seconds"),
        minutes=40,
        floor=5,
        since=now.isoformat(timespec="seconds"),
        reason="job 20 pends for a reservation; SLURM's plan starts a job of 40 min now",
    )
    adaptation.save(run_dir, adaptation.Adaptation(fit, ()))
    assert asking.fit_in_force(run_dir, now) is None  # the recorded process is gone
    live = replace(claims.Submitter.recorded(run_dir), host=claims.hostname(), pid=os.getpid())
    live.record(run_dir)
    assert asking.fit_in_force(run_dir, now) == fit
    assert asking.fit_in_force(run_dir, now + timedelta(minutes=39)) is None  # expired
    facts = replace(_facts(run_dir), fit=fit, probe_detail=None, probe_starts={})
    status = cluster_status.build(run_dir, facts)
    (note,) = [n for n in status.notes if n.startswith("no walltime probe")]
    assert "the workflow's adaptation is in force" in note and fit.reason in note
    assert note.endswith("`cluster status --probe` asks SLURM's plan again")
    text = cluster_status_format.format_table(status)
    assert "in force: jobs end by" in text and text.count("ask again in a minute") <= 1


def test_a_live_workflow_that_adapts_makes_the_probe_and_cluster_status_none(tmp_path):
    me = claims.Submitter(workdir=str(tmp_path), snakefile="Snakefile", cluster=True,
                          host=claims.hostname(), pid=os.getpid(), started_at=markers.now(),
                          process=claims.process_identity(os.getpid()))  # fmt: skip
    me.record(tmp_path)
    assert asking.adapting_workflow(tmp_path) is None  # no adaptation record
    later = (datetime.now() + timedelta(seconds=2)).isoformat(timespec="seconds")
    adaptation.save(tmp_path, adaptation.Adaptation(since=later))
    assert asking.adapting_workflow(tmp_path) == me
    earlier = (datetime.now() - timedelta(hours=1)).isoformat(timespec="seconds")
    adaptation.save(tmp_path, adaptation.Adaptation(since=earlier))  # an older workflow's
    assert asking.adapting_workflow(tmp_path) is None  # this one does not adapt
    adaptation.save(tmp_path, adaptation.Adaptation(since=later))
    replace(me, cluster=False).record(tmp_path)
    assert asking.adapting_workflow(tmp_path) is None  # the local executor


def test_test_only_is_not_asked_where_its_answer_is_known_wrong():
    untrusted = asking.test_only_untrusted
    said = "job 7 may start in any of a,b, and --test-only tests one"
    assert untrusted(job("7", "PENDING", partition="a,b"), {}) == said
    one = job("7", "PENDING", partition="a")
    assert untrusted(one, {}) is None
    assert "PrivateData hides jobs" in untrusted(one, {"PrivateData": "accounts,jobs"})
