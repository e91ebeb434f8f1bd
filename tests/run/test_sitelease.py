"""A shard job's lease in a campaign (``campaign.site``): each file's marker names the site
and the lease's epoch; a job whose lease another site took over writes nothing more, not
even the file it is on; each finished shard is recorded for ``coverage``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from inproc import FakeEngine, s3_run_config

from shardwise.classify import shard_job
from shardwise.classify.shard_job import run_shard
from shardwise.cli.main import main
from shardwise.config import CampaignSettings
from shardwise.errors import ConfigError
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage.render import report_dict, report_text
from shardwise.ops.verify import check as verify
from shardwise.planner import campaign
from shardwise.planner.prepare import prepare_run
from shardwise.run import failures, outputs, plan, quarantine, sitelease
from shardwise.run.opened import open_run
from shardwise.store.lease import Lease, LeaseLostError, Leases, Taken, lease_rel
from shardwise.store.location import Location

pytestmark = pytest.mark.s3


def _planned(tmp_path: Path, s3) -> tuple[Path, Location, int, list[str]]:
    cfg, _corpus = s3_run_config(tmp_path, s3, total_shards=2)
    cfg["campaign"] = {"site": "a", "lease_seconds": 60}
    prepare_run(cfg, main_process=True, dryrun=False)
    run_dir = Path(cfg["run_dir"])
    table = plan.load(run_dir)
    shard = max(plan.nonempty_shards(table), key=lambda s: plan.files_of_shard(table, s).num_rows)
    files = plan.files_of_shard(table, shard)["file"].to_pylist()
    assert len(files) >= 2
    return run_dir, Location(s3.url("labels"), s3.options()), shard, files


class StealsAfterOneFile(FakeEngine):
    """Labels like FakeEngine; while labelling the second file, site b takes the lease."""

    def __init__(self, output: Location, shard: int) -> None:
        super().__init__()
        self.output, self.shard, self.calls = output, shard, 0

    def run(self, n: int):
        self.calls += 1
        if self.calls == 2:  # what a takeover leaves: another site's lease, another ETag
            stolen = Lease.new(self.shard, "b", "process 9 on other", epoch=2)
            self.output.call_s3(
                lease_rel(self.shard), "put_object", Body=b"{}", Metadata=stolen.metadata()
            )
        return super().run(n)


def test_markers_name_the_site_and_each_shard_is_recorded(tmp_path: Path, s3) -> None:
    run_dir, output, shard, files = _planned(tmp_path, s3)
    report = run_shard(run_dir, shard, engine_factory=lambda _c: FakeEngine(), progress=False)
    assert report.labelled == len(files)
    for rel in files:
        marker = json.loads(output.read_bytes(outputs.MARKER.rel(rel)))
        assert (marker["site"], marker["lease_epoch"]) == ("a", 1)
    assert Leases(output, 60).seen(shard) is None  # released
    (done,) = sitelease.read_done(output)
    assert (done.shard, done.site, done.labelled) == (shard, "a", len(files))
    run_shard(run_dir, shard, engine_factory=lambda _c: FakeEngine(), progress=False)
    (again,) = sitelease.read_done(output)
    assert again == done  # a rerun that labelled nothing keeps the record of who did
    found = coverage.report(run_dir)
    (row,) = found.campaign.rows
    assert (row.site, row.shards_done, row.files_labelled, row.live_jobs) == ("a", 1, len(files), 0)
    assert row.shards_per_hour == 1.0 and row.heard_s_ago is not None
    text = report_text(found, "table")
    said = f"site a (this site): 1 shard(s) finished ({len(files)} file(s) labelled), 0 live job(s)"
    assert said in text
    assert report_dict(found)["campaign"]["sites"][0]["site"] == "a"


def test_a_job_whose_lease_was_taken_over_writes_nothing_more(tmp_path: Path, s3) -> None:
    run_dir, output, shard, files = _planned(tmp_path, s3)
    engine = StealsAfterOneFile(output, shard)
    with pytest.raises(LeaseLostError, match=rf"shard {shard}: this job's lease \(site 'a'"):
        run_shard(run_dir, shard, engine_factory=lambda _c: engine, progress=False)
    first, second = files[0], files[1]
    assert json.loads(output.read_bytes(outputs.MARKER.rel(first)))["site"] == "a"
    for kind in outputs.kinds():
        if kind.root == "output":
            assert not output.exists(kind.rel(second)), kind.name  # not a byte of it
    assert Leases(output, 60).seen(shard).lease.site == "b"  # its lease is left alone
    assert not (run_dir / "shards" / f"{shard}.done").exists()


def test_a_site_with_another_lease_length_is_refused(tmp_path: Path, s3) -> None:
    """The first site pins the campaign's lease length beside run.json; a site with
    another would take leases over early, so it is refused, the field named."""
    _planned(tmp_path, s3)
    cfg, _ = s3_run_config(tmp_path / "b", s3, total_shards=2)
    cfg["campaign"] = {"site": "b", "lease_seconds": 30}
    with pytest.raises(ConfigError, match=r"campaign.lease_seconds: 30 on site 'b', but the"):
        prepare_run(cfg, main_process=True, dryrun=False)
    cfg["campaign"]["lease_seconds"] = 60
    prepare_run(cfg, main_process=True, dryrun=False)  # the same: it joins


def _campaign_site(tmp_path: Path, s3, site: str, lease_seconds: float) -> Path:
    """One site's planned run directory over the shared bucket (a campaign of two)."""
    cfg, _corpus = s3_run_config(tmp_path / site, s3, total_shards=2)
    cfg["campaign"] = {"site": site, "lease_seconds": lease_seconds}
    prepare_run(cfg, main_process=True, dryrun=False)
    return Path(cfg["run_dir"])


_JOB = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from inproc import FakeEngine
from shardwise.classify import shard_job
from shardwise.classify.shard_job import run_shard
run_shard(Path({run_dir!r}), {shard}, engine_factory=lambda _c: FakeEngine(), progress=False)
"""


@pytest.mark.slow
@pytest.mark.race
@pytest.mark.parametrize("held", ["sidecar", "marker"])
def test_a_holder_stalled_past_its_lease_writes_nothing_after_it_resumes(
    tmp_path: Path, s3, held: str
) -> None:
    """Site a's job sends a file's output, which the store holds, and is stopped
    (SIGSTOP); site b takes the shard over once the lease runs out and labels it; a is
    resumed and its held request lands: it writes nothing after that (its fence finds the
    lease gone), its late marker loses to b's, and a sidecar of a's beside b's marker is
    named by ``verify``."""
    run_a = _campaign_site(tmp_path, s3, "a", 2)
    run_b = _campaign_site(tmp_path, s3, "b", 2)
    output = Location(s3.url("labels"), s3.options())
    table = plan.load(run_a)
    shard = max(plan.nonempty_shards(table), key=lambda s: plan.files_of_shard(table, s).num_rows)
    first = plan.files_of_shard(table, shard)["file"].to_pylist()[0]
    kind = outputs.SIDECAR if held == "sidecar" else outputs.MARKER
    hold = s3.server.hold(method="PUT", key=lambda key: key.endswith(kind.rel(first)))
    code = _JOB.format(tests=str(Path(__file__).parents[1]), run_dir=str(run_a), shard=shard)
    job = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        assert hold.reached.wait(timeout=120), "site a never wrote"  # the event: it sent it
        job.send_signal(signal.SIGSTOP)
        taken = run_shard(run_b, shard, engine_factory=lambda _c: FakeEngine(), progress=False)
        assert taken.labelled >= 1
        job.send_signal(signal.SIGCONT)
        hold.release()
        _, err = job.communicate(timeout=120)
    finally:
        job.kill()
        hold.release()
    assert job.returncode != 0
    assert "this job's lease (site 'a', epoch 1)" in err or "another holder marked" in err, err
    marker = json.loads(output.read_bytes(outputs.MARKER.rel(first)))
    assert (marker["site"], marker["lease_epoch"]) == ("b", 2)  # the late marker lost
    done = json.loads(output.read_bytes(sitelease.done_rel(shard)))
    assert done["site"] == "b"
    report = verify.verify_run(run_b)
    mixed = [p for p in report.problems if "outputs written by different holders" in p.what]
    if held == "sidecar":  # a's held sidecar landed over b's: the file is named
        (problem,) = mixed
        assert "sidecar: site 'a', epoch 1" in problem.what and "--repair" in problem.what
    else:  # a's sidecar and stats came first and b wrote over them: all b's
        assert mixed == []


def test_two_run_directories_of_one_site_name_never_take_each_others_live_lease(
    tmp_path: Path, s3
) -> None:
    """A site re-planned in a new directory while the old one's jobs run, or two users of
    one cluster under one site name: each run directory is its own holder (its instance
    in the lease); only a lease of its own directory is taken over at once."""
    one, two = (
        _campaign_site(tmp_path / "one", s3, "a", 60),
        _campaign_site(tmp_path / "two", s3, "a", 60),
    )
    ids = sitelease.instance_id(one), sitelease.instance_id(two)
    assert ids[0] != ids[1] and sitelease.instance_id(one) == ids[0]  # made once
    output = Location(s3.url("labels"), s3.options())
    leases = Leases(output, 60)
    first = leases.take(0, "a", "job 1", instance=ids[0])
    other = leases.take(0, "a", "job 2", stale_own=True, instance=ids[1])
    assert isinstance(other, sitelease.Seen) and other.lease.token == first.lease.token
    said = sitelease.refusal(other, CampaignSettings(site="a", lease_seconds=60))
    assert f"held by another run directory of site 'a' (instance {ids[0]})" in said
    again = leases.take(0, "a", "job 3", stale_own=True, instance=ids[0])  # its own directory
    assert isinstance(again, Taken) and again.took_over is not None and again.lease.epoch == 2


def test_a_wait_for_another_sites_lease_ends_before_the_jobs_own_walltime(
    tmp_path: Path, s3, monkeypatch
) -> None:
    """Site b holds the shard live; site a's job (on SLURM: its end known) stops waiting in
    time to leave a file's need before its stop, writes nothing, and leaves b's lease; the
    bound is the job's stop less one file's measured time and a start-up."""
    run_dir, output, shard, files = _planned(tmp_path, s3)
    other = Leases(output, 60).take(shard, "b", "process 9 on other")
    assert isinstance(other, Taken)
    asked: list[bool] = []

    def stops_in(*_a, **_k):
        asked.append(True)
        return shard_job.FILE_UNMEASURED_S + 2.0  # two seconds to wait, then a file's time

    monkeypatch.setattr(shard_job.stopcause, "seconds_left", stops_in)
    began = time.monotonic()
    with pytest.raises(sitelease.LeaseWaitEndedError, match="stopped waiting for the lease of"):
        run_shard(run_dir, shard, engine_factory=lambda _c: FakeEngine(), progress=False)
    assert asked == [True] and time.monotonic() - began < 10
    assert Leases(output, 60).seen(shard).lease.site == "b"  # left alone
    assert not any(output.exists(outputs.MARKER.rel(f)) for f in files)
    record = failures.latest(run_dir, shard)
    assert record is not None and record.kind == "claimed", record
    assert "stopped waiting for the lease of site 'b'" in record.reason


def test_a_quarantine_at_one_site_is_the_campaigns(tmp_path: Path, s3) -> None:
    """Site a leaves a file out; site b's job leaves it out too, its shard finishes with it
    quarantined, and every view of both sites lists it; a release at a reopens the shard
    there, and a's planning does not take b's marker (which left the file out) for done."""
    one, two = (
        _campaign_site(tmp_path / "one", s3, "a", 60),
        _campaign_site(tmp_path / "two", s3, "b", 60),
    )
    table = plan.load(one)
    shard = max(plan.nonempty_shards(table), key=lambda s: plan.files_of_shard(table, s).num_rows)
    files = plan.files_of_shard(table, shard)["file"].to_pylist()
    broken = files[0]
    assert main(["quarantine", "--run-dir", str(one), broken, "--reason", "truncated gzip"]) == 0
    output = Location(s3.url("labels"), s3.options())
    assert output.exists(quarantine.entry_rel(broken))
    assert not (one / quarantine.QUARANTINE_JSON).exists()  # the campaign's, in the bucket
    assert set(quarantine.load(two)) == {broken}  # seen from the other site
    report = run_shard(two, shard, engine_factory=lambda _c: FakeEngine(), progress=False)
    assert report.labelled == len(files) - 1 and report.quarantined == 1
    assert not output.exists(outputs.MARKER.rel(broken))
    for run_dir in (one, two):
        found = coverage.report(run_dir)
        assert [e.file for e in found.coverage.quarantined] == [broken]
    assert main(["quarantine", "--run-dir", str(two), "--release", broken]) == 0
    assert quarantine.load(one) == {} and not output.exists(quarantine.entry_rel(broken))
    ctx = open_run(one)
    assert shard not in campaign.bring_in(ctx).marked  # b's marker left the file out
    run_shard(one, shard, engine_factory=lambda _c: FakeEngine(), progress=False)
    assert output.exists(outputs.MARKER.rel(broken))  # labelled, by site a


def test_a_quarantine_from_before_a_site_joined_still_counts_until_released(
    tmp_path: Path, s3
) -> None:
    one = _campaign_site(tmp_path / "one", s3, "a", 60)
    table = plan.load(one)
    rel = table["file"][0].as_py()
    local = {rel: quarantine.Entry(rel, "truncated", "then", "me")}
    (one / quarantine.QUARANTINE_JSON).write_bytes(quarantine.to_json(local))
    assert set(quarantine.load(one)) == {rel}  # beside the campaign's (none yet)
    assert quarantine.release(one, [rel])[0] == [rel]
    assert quarantine.load(one) == {}
