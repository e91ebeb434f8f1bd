"""Shard leases on a real S3-protocol server (moto): one holder per shard, renewal,
takeover only after the lease ran out by the store's clock, a lost lease noticed, and the
probe that refuses a store ignoring If-None-Match."""

from __future__ import annotations

import threading
import time

import pytest

from shardwise.store import lease
from shardwise.store.lease import LeaseLostError, Leases, Seen, Taken
from shardwise.store.location import Location


@pytest.fixture
def output(s3) -> Location:
    return Location(s3.url("labels"), s3.options())


def test_one_site_takes_a_shard_the_other_sees_it_held(output: Location) -> None:
    a, b = Leases(output, 60), Leases(output, 60)
    got = a.take(3, "a", "SLURM job 12 on node7")
    assert isinstance(got, Taken) and got.lease.epoch == 1 and got.took_over is None
    other = b.take(3, "b", "process 5 on cloud1")
    assert (
        isinstance(other, Seen) and other.lease.site == "a" and other.lease.holder.endswith("node7")
    )
    assert other.age_s < 5 and not b.expired(other)
    renewed = a.renew(got)
    assert renewed.etag != got.etag and a.seen(3).lease == renewed.lease  # a new body
    assert renewed.lease.renewal == 1 and renewed.lease.token == got.lease.token
    a.release(renewed)
    assert a.seen(3) is None
    assert isinstance(b.take(3, "b", "process 5 on cloud1"), Taken)  # free again


def test_of_racing_sites_exactly_one_takes_the_shard(output: Location) -> None:
    results: list[object] = []
    barrier = threading.Barrier(6)

    def site(name: str) -> None:
        barrier.wait()
        results.append(Leases(output, 60).take(9, name, f"process on {name}"))

    threads = [threading.Thread(target=site, args=(f"s{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(isinstance(r, Taken) for r in results) == 1


def test_an_expired_lease_is_taken_over_once_and_its_holder_loses_it(output: Location) -> None:
    slow, other, third = Leases(output, 60), Leases(output, 1), Leases(output, 1)
    held = slow.take(4, "a", "SLURM job 1 on n1")
    assert isinstance(held, Taken)
    time.sleep(2.2)  # the store's clock: whole seconds
    seen = other.seen(4)
    assert seen is not None and seen.age_s >= 1 and other.expired(seen)
    took = other.take(4, "b", "process 2 on c1")
    assert isinstance(took, Taken) and took.lease.epoch == 2 and took.took_over.lease.site == "a"
    assert isinstance(third.take(4, "c", "process 3 on c2"), Seen)  # just renewed: live
    with pytest.raises(
        LeaseLostError, match=r"shard 4: this job's lease \(site 'a', epoch 1\) is lost: site 'b'"
    ):
        slow.renew(held)
    slow.release(held)  # not its lease any more: left alone
    assert other.seen(4).lease.site == "b"


def test_a_live_lease_of_the_same_site_is_taken_when_its_job_is_known_gone(
    output: Location,
) -> None:
    leases = Leases(output, 600)
    first = leases.take(1, "a", "SLURM job 7 on n1")
    retry = leases.take(1, "a", "SLURM job 8 on n2", stale_own=True)
    assert isinstance(retry, Taken) and retry.took_over.lease.holder == first.lease.holder
    assert isinstance(Leases(output, 600).take(1, "b", "x", stale_own=True), Seen)


def test_all_leases_in_one_listing(output: Location) -> None:
    leases = Leases(output, 60)
    for shard in (0, 2, 11):
        leases.take(shard, "a", "job")
    assert [s.lease.shard for s in leases.all_seen()] == [0, 2, 11]


def test_the_probe_tells_a_store_that_ignores_conditions(s3, output: Location) -> None:
    assert lease.probe(output) is None
    s3.server.honour_conditional_writes = False
    assert "the store ignores it" in lease.probe(output)
    assert not s3.keys("labels/_campaign/probe")  # the probe cleans up
    no_conditions = Location(s3.url("labels"), s3.options(conditional_writes=False))
    assert lease.probe(no_conditions) == "storage.conditional_writes is false"
    s3.server.honour_conditional_writes = True
    s3.server.inject(1, status=412, code="PreconditionFailed", method="PUT")
    assert lease.probe(output) == "an If-None-Match: * create of a fresh key was refused (412)"


def test_a_missing_bucket_is_a_storage_error_not_a_store_that_ignores_conditions(s3) -> None:
    missing = Location("s3://no-such-bucket/labels", s3.options())
    with pytest.raises(lease.StorageError, match="no-such-bucket"):
        lease.probe(missing)
    with pytest.raises(lease.StorageError, match="no-such-bucket"):
        Leases(missing, 60).take(0, "a", "job")


def test_leases_need_an_object_store(tmp_path) -> None:
    with pytest.raises(lease.StorageError, match="leases need an S3-compatible output"):
        Leases(Location(str(tmp_path)), 60)
    assert "not an S3-compatible store" in lease.probe(Location(str(tmp_path)))


@pytest.mark.parametrize(
    ("knob", "said"),
    [
        ("honour_if_match", "an If-Match write with a stale ETag succeeded (the store ignores it)"),
        ("send_date", "its replies carry no Date header: a lease could never run out"),
    ],
)
def test_the_probe_refuses_a_store_that_ignores_if_match_or_sends_no_date(
    s3, output: Location, knob: str, said: str
) -> None:
    setattr(s3.server, knob, False)
    try:
        assert lease.probe(output) == said
    finally:
        setattr(s3.server, knob, True)
    assert not s3.keys("labels/_campaign/probe")  # the probe cleans up


def test_release_deletes_only_the_lease_it_wrote(output: Location, monkeypatch) -> None:
    """The look and the delete are two requests: a takeover between them changes the
    ETag, and the conditional delete leaves the new holder's lease alone."""
    a = Leases(output, 1)
    held = a.take(5, "a", "job 1")
    stale = a.seen(5)  # what a's release looks at ...
    monkeypatch.setattr(a, "seen", lambda shard: stale)
    b = Leases(output, 1)
    time.sleep(2.2)  # the store's clock: whole seconds
    took = b.take(5, "b", "job 2")  # ... and b takes it over before a's delete
    assert isinstance(took, Taken)
    a.release(held)
    assert b.seen(5).lease.token == took.lease.token  # b's lease stands
