"""Shard leases in the output bucket: how several sites label one corpus, no shard twice.

A campaign's sites (clusters, or a cloud node, each with its own run directory and
scheduler) share nothing but the output bucket, so the bucket holds who labels a shard:
``_campaign/leases/<shard>.lease``, one object per shard a job holds now. Its holder
creates it with ``If-None-Match: *`` (of two sites exactly one gets it), renews it with
``If-Match: <its ETag>`` while it runs and before each file's marker, and deletes it when
it ends. A lease nobody renewed for ``lease_seconds`` by the *store's* clock (the reply's
``Date`` minus the object's ``Last-Modified``: no site's clock is trusted) may be taken
over by one other site, again with ``If-Match`` on the ETag it saw: of two that try,
one wins. A holder whose renewal fails has lost the shard and writes no further marker.

What a lease says is in the object's metadata (one HEAD reads it with its ETag and age)
and, for people, in its body. A store that ignores the conditions would let two sites
both win: :func:`probe` finds that out once, before a campaign relies on it.
"""

import json
import secrets
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, Self

from shardwise.errors import RecordError, ShardClaimedError, StorageError
from shardwise.store.backoff import describe, s3_reply
from shardwise.store.location import Location

#: The output root's folder of a campaign's own records (no output of a file: ``verify``
#: and the listings of outputs pass over it).
CAMPAIGN = "_campaign/"
#: Where the leases lie under the output root (no output kind ends in ``.lease``).
LEASES = "_campaign/leases"
SUFFIX = ".lease"
_PROBES = "_campaign/probe"


@dataclass(frozen=True, kw_only=True)
class Lease:
    """Who holds a shard: the site, the job (``SLURM job 12 on node7`` / a process), the
    lease's epoch (1 when created, +1 at each takeover), the holder's random token and
    how many times it renewed the lease (so that each renewal changes the body, and with
    it the ETag a takeover must match: a renewal between another site's look and its
    takeover makes the takeover fail)."""

    shard: int
    site: str
    holder: str
    epoch: int
    token: str
    renewal: int = 0
    #: The run directory of the site that holds it (``run/sitelease.py`` ``instance_id``):
    #: two run directories of one site name are two holders ("": a lease of an older
    #: version, judged as the site's own).
    instance: str = ""

    @classmethod
    def new(cls, shard: int, site: str, holder: str, epoch: int = 1, instance: str = "") -> Self:
        """A lease for this process, with a fresh token."""
        token = secrets.token_hex(8)
        return cls(shard=shard, site=site, holder=holder, epoch=epoch, token=token,
                   instance=instance)  # fmt: skip

    def metadata(self) -> dict[str, str]:
        """The object's ``x-amz-meta-*`` (ASCII only: the holder is reduced to it)."""
        holder = self.holder.encode("ascii", "replace").decode()
        return {
            "shard": str(self.shard),
            "site": self.site,
            "holder": holder,
            "epoch": str(self.epoch),
            "token": self.token,
            "renewal": str(self.renewal),
            "instance": self.instance,
        }

    @classmethod
    def from_metadata(cls, meta: dict[str, str], where: str) -> Self:
        """The lease a HEAD's metadata describes; RecordError naming what is missing."""
        try:
            return cls(
                shard=int(meta["shard"]),
                site=meta["site"],
                holder=meta["holder"],
                epoch=int(meta["epoch"]),
                token=meta["token"],
                renewal=int(meta.get("renewal", "0")),
                instance=meta.get("instance", ""),
            )
        except (KeyError, ValueError) as exc:
            raise RecordError(f"{where}: not a shardwise lease ({exc!r} in its metadata)") from exc


@dataclass(frozen=True)
class Seen:
    """A lease as the store has it now: its ETag and its age by the store's clock."""

    lease: Lease
    etag: str
    age_s: float


@dataclass(frozen=True)
class Taken:
    """A lease this process holds (the ETag of its last write), and whose it took over."""

    lease: Lease
    etag: str
    took_over: Seen | None = None


class LeaseLostError(ShardClaimedError):
    """This process's lease was taken over (or removed): it must write no more markers;
    another site holds the shard (not a store failure: nothing to retry here)."""


def lease_rel(shard: int) -> str:
    """The lease object of ``shard``, relative to the output root."""
    return f"{LEASES}/{shard}{SUFFIX}"


class Leases:
    """The leases of one campaign's output (an S3-compatible store)."""

    def __init__(self, output: Location, lease_seconds: float) -> None:
        if not output.is_s3:
            msg = f"leases need an S3-compatible output (s3://...), not {output.uri}"
            raise StorageError(msg)
        self.output = output
        self.lease_seconds = float(lease_seconds)

    def seen(self, shard: int) -> Seen | None:
        """The lease of ``shard`` now (one HEAD); None when nobody holds it."""
        rel = lease_rel(shard)
        try:
            head = self.output.call_s3(rel, "head_object")
        except (OSError, StorageError) as exc:
            if isinstance(exc, FileNotFoundError) or s3_reply(exc, through_retries=True)[1] == 404:
                return None
            raise
        lease = Lease.from_metadata(head.get("Metadata") or {}, self.output.url(rel))
        return Seen(lease, _etag(head), _age_s(head))

    def expired(self, seen: Seen) -> bool:
        """Whether nobody renewed ``seen`` within the lease (by the store's clock)."""
        return seen.age_s > self.lease_seconds

    def take(
        self,
        shard: int,
        site: str,
        holder: str,
        *,
        stale_own: bool = False,
        instance: str = "",
    ) -> Taken | Seen:
        """Take ``shard``: create its lease, or take over one that expired (or, with
        ``stale_own``, one of this site's run directory, ``instance``, whose job the
        site's scheduler knows ended: another run directory of the same site name is
        another holder); else the other holder's lease, live."""
        for _ in range(3):  # a lease released or taken between our two requests: look again
            mine = Lease.new(shard, site, holder, instance=instance)
            etag = self._put(shard, mine, IfNoneMatch="*")
            if etag is not None:
                return Taken(mine, etag)
            seen = self.seen(shard)
            if seen is None:
                continue
            if seen.lease.token == mine.token:  # a retried PUT whose first try landed
                return Taken(mine, seen.etag)
            own = seen.lease.site == site and seen.lease.instance == instance
            if not (self.expired(seen) or (stale_own and own)):
                return seen
            mine = Lease.new(shard, site, holder, epoch=seen.lease.epoch + 1, instance=instance)
            etag = self._put(shard, mine, IfMatch=seen.etag)
            if etag is not None:
                return Taken(mine, etag, took_over=seen)
        now = self.seen(shard)
        if now is None:
            raise StorageError(f"{self.output.url(lease_rel(shard))}: the lease keeps changing")
        return now

    def renew(self, taken: Taken) -> Taken:
        """Renew ``taken`` (its age back to 0); LeaseLostError when another holder took it
        over or it was removed."""
        renewed = replace(taken.lease, renewal=taken.lease.renewal + 1)
        etag = self._put(renewed.shard, renewed, IfMatch=taken.etag)
        if etag is not None:
            return Taken(renewed, etag, taken.took_over)
        seen = self.seen(renewed.shard)
        if seen is not None and seen.lease == renewed:
            return Taken(renewed, seen.etag, taken.took_over)  # a retried PUT that landed
        who = "nobody" if seen is None else f"site {seen.lease.site!r} ({seen.lease.holder})"
        msg = f"shard {taken.lease.shard}: this job's lease (site {taken.lease.site!r}, epoch "
        raise LeaseLostError(msg + f"{taken.lease.epoch}) is lost: {who} holds it now")

    def release(self, taken: Taken) -> None:
        """Remove the lease if it is still this process's: one ``DELETE`` with
        ``If-Match`` on the ETag of its last write (a lease taken over since is another
        ETag: the store refuses, and it is left alone; a store that does not know the
        condition on a delete, where the look before it is all the check)."""
        rel = lease_rel(taken.lease.shard)
        seen = self.seen(taken.lease.shard)
        if seen is None or seen.lease.token != taken.lease.token:
            return
        try:
            self.output.call_s3(rel, "delete_object", IfMatch=seen.etag)
        except (OSError, StorageError) as exc:
            if isinstance(exc, FileNotFoundError) or s3_reply(exc, through_retries=True)[1] in (
                404,
                412,
            ):
                return  # gone, or taken over between the look and the delete
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"cannot remove {self.output.url(rel)}: {describe(exc)}") from exc

    def all_seen(self) -> list[Seen]:
        """Every lease now: one listing of the leases' prefix, one HEAD per lease."""
        prefix = Location(self.output.url(LEASES), self.output.options)
        shards = []
        for rel, _size in prefix.list_files():
            name = rel.removesuffix(SUFFIX)
            if rel.endswith(SUFFIX) and name.isdigit():
                shards.append(int(name))
        found = (self.seen(shard) for shard in sorted(shards))
        return [seen for seen in found if seen is not None]

    def _put(self, shard: int, lease: Lease, **condition: str) -> str | None:
        """One conditional PUT of ``lease``; its ETag, or None when the condition failed."""
        body = json.dumps(asdict(lease), sort_keys=True).encode() + b"\n"
        return _conditional_put(
            self.output, lease_rel(shard), body, Metadata=lease.metadata(), **condition
        )


def unfit(output: Location) -> str | None:
    """Why ``output`` cannot keep leases, known without a request (None: it may)."""
    if not output.is_s3:
        return f"{output.uri} is not an S3-compatible store"
    if not output.options.conditional_writes:
        return "storage.conditional_writes is false"
    return None


def probe(output: Location) -> str | None:
    """Whether ``output`` keeps leases: two ``If-None-Match: *`` creates of one probe key,
    the second of which must fail; an ``If-Match`` with a stale ETag and one on a missing
    key, both of which must fail (older MinIO accepted them, and created the object); and
    a ``Date`` on its replies (without it a lease never runs out). None when it does;
    else why not (Google Cloud Storage's XML API, which applies the conditions to reads
    only, fails the second create)."""
    why = unfit(output)
    if why is not None:
        return why
    rel = f"{_PROBES}/{secrets.token_hex(8)}"
    missing = f"{rel}-absent"
    try:
        outcomes = [_create(output, rel) for _ in range(2)]
        stale = _conditional_put(output, rel, b"probe\n", IfMatch='"0000"') is not None
        absent = _conditional_put(output, missing, b"probe\n", IfMatch='"0000"') is not None
        dated = _dated(output, rel)
    finally:
        output.remove(rel)
        output.remove(missing)
    checks = [
        (not outcomes[0], "an If-None-Match: * create of a fresh key was refused (412)"),
        (outcomes[1], "a second If-None-Match: * create of one key succeeded (the store "
         "ignores it; Google Cloud Storage's XML API applies it to reads only)"),
        (stale, "an If-Match write with a stale ETag succeeded (the store ignores it)"),
        (absent, "an If-Match write to a missing key succeeded (it created the object)"),
        (not dated, "its replies carry no Date header: a lease could never run out"),
    ]  # fmt: skip
    return next((why for failed, why in checks if failed), None)


def _dated(output: Location, rel: str) -> bool:
    """Whether a HEAD of ``rel`` carries the store's ``Date`` (what a lease's age is)."""
    head = output.call_s3(rel, "head_object")
    return bool((head.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("date"))


def _create(output: Location, rel: str) -> bool:
    """One ``If-None-Match: *`` PUT of ``rel``, never the HEAD-then-PUT fallback."""
    return _conditional_put(output, rel, b"probe\n", IfNoneMatch="*") is not None


def _conditional_put(output: Location, rel: str, body: bytes, **kwargs: Any) -> str | None:
    """One PUT of ``rel`` with its conditions (``IfNoneMatch``, ``IfMatch``); the new
    ETag, or None when a condition failed (412, or 404 for ``If-Match``: the key was
    removed). Any other failure, a 404 to a create (no bucket) too, is a StorageError
    naming the object."""
    failed = (404, 412) if "IfMatch" in kwargs else (412,)
    try:
        reply = output.call_s3(rel, "put_object", Body=body, **kwargs)
    except (OSError, StorageError) as exc:
        if isinstance(exc, FileExistsError) or s3_reply(exc, through_retries=True)[1] in failed:
            return None
        if isinstance(exc, StorageError):
            raise
        raise StorageError(f"cannot write {output.url(rel)}: {describe(exc)}") from exc
    return _etag(reply)


def _etag(reply: dict[str, Any]) -> str:
    return str(reply.get("ETag") or "").strip('"')


def _age_s(head: dict[str, Any]) -> float:
    """Seconds since the object was written, by the store's clock (its reply's ``Date``)."""
    modified = head.get("LastModified")
    date = (head.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("date")
    if not isinstance(modified, datetime) or not date:
        return 0.0  # no clock to judge by: treated as just renewed (never taken early)
    return max(0.0, (parsedate_to_datetime(date) - modified).total_seconds())
