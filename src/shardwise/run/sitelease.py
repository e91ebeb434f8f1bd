"""A shard job's lease in a campaign of several sites (``campaign.site``): taken before
the first file, renewed in the background every third of the lease and before each
file's outputs are written, released at the end (``store/lease.py`` has the protocol).

The job holds the shard's local claim first (``run/claims.py``): the site's own scheduler
has then judged any earlier job of this site on the shard gone, so a lease of this site
is taken over at once, without waiting for it to run out. A lease another site renewed
within ``lease_seconds`` (it took the shard after this site planned) is waited for, said
in the job's log: released, the job finds the files marked; run out, it takes over. A
renewal that fails means another site took the shard over (this job was too slow to
renew, or the store unreachable for a whole lease): the job writes nothing more, not
even the file it is on.
"""

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Self

from shardwise.config import CampaignSettings
from shardwise.errors import RecordError, ShardClaimedError, StorageError
from shardwise.run import markers, summaries
from shardwise.run.markers import now
from shardwise.run.record import Fields
from shardwise.store.atomic import create_exclusive, json_bytes
from shardwise.store.lease import LeaseLostError, Leases, Seen, Taken
from shardwise.store.location import Location

log = logging.getLogger("shardwise.run.sitelease")
#: Where each finished shard's campaign record lies under the output root.
DONE = "_campaign/done"
#: Where each finished shard's marker and label-count summary are kept for every site.
SHARDS, SUMMARIES = "_campaign/shards", "_campaign/summaries"
#: The share of the lease a write must have left to start (by this job's clock).
FENCE_MARGIN = 1 / 3


class SiteLease:
    """This job's lease on one shard, while it labels it."""

    def __init__(self, leases: Leases, taken: Taken, sent: float) -> None:
        self.leases = leases
        self._taken = taken
        self._sent = sent  # when the request that holds the lease now was sent (monotonic)
        self._lock = threading.Lock()
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_every, daemon=True)

    @property
    def holder(self) -> tuple[str, int]:
        """The site and lease epoch each file's marker records."""
        return self._taken.lease.site, self._taken.lease.epoch

    def renew(self) -> None:
        """Renew now; LeaseLostError once it is lost."""
        with self._lock:
            if self._lost is not None:
                raise LeaseLostError(self._lost)
            sent = time.monotonic()
            try:
                self._taken = self.leases.renew(self._taken)
            except LeaseLostError as exc:
                self._lost = str(exc)
                raise
            self._sent = sent

    def fence(self) -> None:
        """Before each write: renew when a third of the lease has passed since the renewal
        that holds it was sent; LeaseLostError when it is lost, or when less than
        :data:`FENCE_MARGIN` of the lease is left by this job's clock (another site may
        take the shard over then: this job writes nothing more)."""
        if time.monotonic() - self._sent > self.leases.lease_seconds / 3:
            self.renew()
        left = self.leases.lease_seconds - (time.monotonic() - self._sent)
        if left < FENCE_MARGIN * self.leases.lease_seconds:
            lease = self._taken.lease
            msg = f"shard {lease.shard}: this job's lease (site {lease.site!r}, epoch "
            msg += f"{lease.epoch}) has {max(left, 0):.0f} s left by its own clock: it writes "
            with self._lock:
                self._lost = msg + "no more (another site may take the shard over)"
            raise LeaseLostError(self._lost)

    def start(self) -> None:
        """Renew in the background from now on."""
        self._thread.start()

    def end(self) -> None:
        """Stop renewing and release the lease (left to run out when that fails)."""
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self.leases.release(self._taken)
        except StorageError as exc:  # it runs out by itself; another site takes it then
            log.warning("shard %s: its lease was not released (%s)", self._taken.lease.shard, exc)

    def _renew_every(self) -> None:
        """Renew every third of the lease until stopped or lost (a store error is retried
        at the next turn: the lease lasts three turns)."""
        while not self._stop.wait(self.leases.lease_seconds / 3):
            try:
                self.renew()
            except LeaseLostError as exc:
                log.warning("%s: this job writes no further outputs", exc)
                return
            except StorageError as exc:
                text = "shard %s: renewing its lease failed (%s); trying again in %.0f s"
                log.warning(text, self._taken.lease.shard, exc, self.leases.lease_seconds / 3)


#: The run directory's campaign instance: a random id that tells two run directories of
#: one site name apart in the bucket's leases.
INSTANCE = "campaign/instance"


def instance_id(run_dir: Path) -> str:
    """This run directory's campaign instance id, made once (create-if-absent: two jobs
    starting together read the same one)."""
    path = Path(run_dir) / INSTANCE
    try:
        return path.read_text("utf-8").strip()
    except FileNotFoundError:
        pass
    create_exclusive(path, secrets.token_hex(8).encode())
    return path.read_text("utf-8").strip()


@contextmanager
def held(
    output: Location,
    campaign: CampaignSettings,
    shard: int,
    holder: str,
    instance: str = "",
    *,
    wait_until: Callable[[], float | None] = lambda: None,
) -> Iterator[SiteLease | None]:
    """The shard's lease while the block runs (None without a campaign); while another
    site (or another run directory of this site, ``instance``) holds it live, this waits
    (:func:`await_free`), until ``wait_until()`` (asked when a wait begins: a
    ``time.monotonic()`` by which the job must stop waiting to leave time for a file;
    None: no bound), past which it raises :class:`LeaseWaitEndedError`."""
    if campaign.site is None:
        yield None
        return
    leases = Leases(output, campaign.lease_seconds)
    sent = time.monotonic()
    got = leases.take(shard, campaign.site, holder, stale_own=True, instance=instance)
    until = None
    while isinstance(got, Seen):  # another site took it since this site planned: rare
        log.warning("%s; this job waits for it", refusal(got, campaign))
        until = wait_until() if until is None else until
        why = await_free(output, campaign, shard, instance, until=until)
        log.warning("shard %s: %s", shard, why)
        sent = time.monotonic()
        got = leases.take(shard, campaign.site, holder, stale_own=True, instance=instance)
    if got.took_over is not None:
        old = got.took_over.lease
        log.warning(
            "shard %s: took over the lease of site %r (%s, epoch %s), unrenewed for %.0f s",
            shard,
            old.site,
            old.holder,
            old.epoch,
            got.took_over.age_s,
        )
    lease = SiteLease(leases, got, sent)
    lease.start()
    try:
        yield lease
    finally:
        lease.end()


@dataclass(frozen=True, kw_only=True)
class SiteDone:
    """``_campaign/done/<shard>.json``: which site finished a shard, when, and how many of
    its files that job labelled (the rest were labelled before, by any site)."""

    shard: int
    site: str
    holder: str
    labelled: int
    finished_at: str

    def to_json(self) -> bytes:
        """The record's bytes."""
        return json_bytes(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """The record; RecordError naming a field that is absent or of the wrong type."""
        return Fields.parse(raw, where).into(cls)


def done_rel(shard: int) -> str:
    """Where the campaign record of a finished shard lies under the output root."""
    return f"{DONE}/{shard}.json"


def record_done(
    output: Location, campaign: CampaignSettings, shard: int, labelled: int, holder: str
) -> None:
    """Record in the bucket that this site finished ``shard`` (what ``coverage`` shows per
    site from any site); nothing without a campaign."""
    if campaign.site is None:
        return
    record = SiteDone(
        shard=shard, site=campaign.site, holder=holder, labelled=labelled, finished_at=now()
    )
    if labelled:
        output.write_bytes(done_rel(shard), record.to_json())
    else:  # another site labelled it: its record stays
        output.create_if_absent(done_rel(shard), record.to_json())


def shard_rel(shard: int) -> str:
    """Where a finished shard's marker is kept for every site (under the output root)."""
    return f"{SHARDS}/{shard}.json"  # not ".done": no listing may take it for a file's marker


def summary_rel(shard: int) -> str:
    """Where a finished shard's label-count summary is kept for every site."""
    return f"{SUMMARIES}/{shard}{summaries.SUFFIX}"


def publish_shard(output: Location, campaign: CampaignSettings, run_dir: Path, shard: int) -> None:
    """Keep this finished shard's marker and summary in the bucket, beside the labels, so
    that every site's ``coverage``, ``verify``, ``domains`` and ``select`` answer for the
    whole campaign (``planner/campaign.py`` ``bring_in``). A store failure is said, not
    raised: the shard is done, and a site without the summary rebuilds it from the files'
    stats."""
    if campaign.site is None:
        return
    try:
        output.write_bytes(shard_rel(shard), markers.shard_marker_path(run_dir, shard).read_bytes())
        summary = summaries.summary_path(run_dir, shard)
        if summary.exists():
            output.write_bytes(summary_rel(shard), summary.read_bytes())
    except (OSError, StorageError) as e:
        log.warning("shard %s: not kept for the campaign's other sites (%s)", shard, e)


def read_done(output: Location) -> list[SiteDone]:
    """Every finished shard's campaign record (one listing of their prefix, one GET each;
    a damaged one is skipped)."""
    prefix = Location(output.url(DONE), output.options)
    found = []
    for rel, _size in prefix.list_files():
        try:
            found.append(SiteDone.from_json(prefix.read_bytes(rel), prefix.url(rel)))
        except (RecordError, FileNotFoundError):
            continue
    return found


class LeaseWaitEndedError(ShardClaimedError):
    """The job stopped waiting for another holder's lease so as to end before its own
    walltime with time for a file: the shard is still that holder's; nothing was written,
    and the shard's next job waits again or takes it over."""


def await_free(
    output: Location,
    campaign: CampaignSettings,
    shard: int,
    instance: str = "",
    *,
    until: float | None = None,
) -> str:
    """Wait until no live job of another site (or of another run directory of this site)
    holds ``shard`` (a look every quarter of the lease, 1 to 30 s); why it is free. Past
    ``until`` (``time.monotonic()``) it raises :class:`LeaseWaitEndedError` instead."""
    leases = Leases(output, campaign.lease_seconds)
    poll_s = min(30.0, max(1.0, campaign.lease_seconds / 4))
    while True:
        seen = leases.seen(shard)
        if seen is None:
            return "released"
        if seen.lease.site == campaign.site and seen.lease.instance == instance:
            return f"held by this site ({seen.lease.holder})"
        if leases.expired(seen):
            return f"site {seen.lease.site!r}'s lease ran out ({seen.age_s:.0f} s unrenewed)"
        if until is not None and time.monotonic() + poll_s > until:
            raise LeaseWaitEndedError(_wait_ended(seen, campaign))
        time.sleep(poll_s)


def _wait_ended(seen: Seen, campaign: CampaignSettings) -> str:
    """Why a job stopped waiting for a lease (its error and failure record)."""
    other = seen.lease
    return (
        f"shard {other.shard}: stopped waiting for the lease of site {other.site!r} "
        f"({other.holder}, epoch {other.epoch}, renewed {seen.age_s:.0f} s ago) so as to end "
        f"before this job's walltime with time for a file; nothing was written, and the "
        f"shard's next job waits again or takes it over once the lease runs out "
        f"({campaign.lease_seconds:g} s unrenewed)"
    )


def refusal(seen: Seen, campaign: CampaignSettings) -> str:
    """Why a job leaves a shard another site holds (its console line)."""
    other = seen.lease
    left = max(0.0, campaign.lease_seconds - seen.age_s)
    whose = f"site {other.site!r}"
    if other.site == campaign.site:
        whose = f"another run directory of site {other.site!r} (instance {other.instance or '?'})"
    return (
        f"shard {other.shard} is held by {whose} ({other.holder}, lease epoch "
        f"{other.epoch}, renewed {seen.age_s:.0f} s ago by the store's clock): this site "
        f"leaves it; it may take it over if nobody renews the lease for {left:.0f} s more"
    )
