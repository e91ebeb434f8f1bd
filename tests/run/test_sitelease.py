"""A shard job's lease in a campaign (``campaign.site``): each file's marker names the site
and the lease's epoch; a job whose lease another site took over writes nothing more, not
even the file it is on; each finished shard is recorded for ``coverage``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inproc import FakeEngine, s3_run_config

from shardwise.classify.shard_job import run_shard
from shardwise.errors import ConfigError
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage.render import report_dict, report_text
from shardwise.planner.prepare import prepare_run
from shardwise.run import outputs, plan, sitelease
from shardwise.store.lease import Lease, LeaseLostError, Leases, lease_rel
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
    assert f"site a: 1 shard(s) finished ({len(files)} file(s) labelled), 0 live job(s)" in text
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
