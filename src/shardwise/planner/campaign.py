"""A site's plan in a campaign of several sites (``campaign.site``; docs/campaigns.md).

At planning the store is probed once (``store/lease.py`` ``probe``: a store that ignores
``If-None-Match`` would let two sites label one shard, so the campaign is refused, and a
single site still works as before); the result is kept in ``<run_dir>/campaign.json``.
Then one listing of the bucket's leases says which shards live jobs of *other* sites hold:
this site labels every other shard, and for those it runs a local ``await_lease`` job
before the shard's own (the classify rule's input), which ends when the lease does:
released (the shard's files are then marked, and the shard job finds nothing to do) or
run out (the shard job takes it over). So no site is idle while a shard is free, and no
invocation ends while the campaign has work another site may abandon.
"""

import hashlib
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Self

from shardwise.config import CampaignSettings, Settings
from shardwise.errors import ConfigError
from shardwise.run import ranges, sitelease
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic
from shardwise.store.lease import Leases, Seen, probe, unfit
from shardwise.store.location import Location

#: The run directory's record of the store probe (one per output root).
PROBED = "campaign.json"
#: The campaign's pin beside run.json, under the output root.
PIN = "_campaign/campaign.json"
#: The await jobs' outputs, one per shard another site held at planning.
AWAITED = "campaign/awaited"


@dataclass(frozen=True)
class CampaignPlan:
    """Which shards live jobs of other sites hold, and what planning says of it."""

    held: tuple[int, ...] = ()
    lines: tuple[str, ...] = ()


def plan(
    run_dir: Path, settings: Settings, output: Location, done: set[int], *, dryrun: bool
) -> CampaignPlan:
    """This site's view of the campaign (nothing without ``campaign.site``); ConfigError
    when the store cannot keep leases."""
    campaign = settings.campaign
    if campaign.site is None:
        return CampaignPlan()
    _probed_once(run_dir, output, campaign.site, dryrun=dryrun)
    _pinned(output, campaign, create=not dryrun)
    leases = Leases(output, campaign.lease_seconds)
    mine = (campaign.site, sitelease.instance_id(run_dir))
    others = [
        seen
        for seen in leases.all_seen()
        if (seen.lease.site, seen.lease.instance) != mine
        and not leases.expired(seen)
        and seen.lease.shard not in done
    ]
    held = tuple(sorted(s.lease.shard for s in others))
    return CampaignPlan(held, tuple(_lines(campaign.site, others, campaign.lease_seconds)))


def _lines(site: str, others: list[Seen], lease_seconds: float) -> list[str]:
    if not others:
        return [f"campaign: site {site!r}; no other site holds a shard now"]
    sites = Counter(s.lease.site for s in others)
    who = ", ".join(f"{name}: {count}" for name, count in sorted(sites.items()))
    shards = ranges.compress(sorted(s.lease.shard for s in others))
    return [
        f"campaign: site {site!r}; {len(others)} shard(s) are held by live jobs of other "
        f"sites ({who}; shards {shards}): this site labels the rest first, then waits for "
        f"those and takes over any whose lease nobody renews for {lease_seconds:.0f} s"
    ]


def _probed_once(run_dir: Path, output: Location, site: str, *, dryrun: bool) -> None:
    """Probe the store unless this run directory did for this output (a dry run writes
    nothing: it only checks what needs no request); ConfigError naming the store and what
    to use instead when it does not honour ``If-None-Match``."""
    record = run_dir / PROBED
    try:
        if json.loads(record.read_text("utf-8")).get("output") == output.uri:
            return
    except (OSError, ValueError, AttributeError):
        pass
    why = unfit(output) if dryrun else probe(output)
    if why is not None:
        msg = f"config campaign.site {site!r}: the output store {output.uri} cannot keep shard "
        msg += f"leases ({why}), so two sites could label one shard; use a store that honours "
        msg += "If-None-Match (AWS S3, Cloudflare R2, a current MinIO), or drop campaign.site "
        raise ConfigError(msg + "to label from this site alone")
    if not dryrun:
        body = {"output": output.uri, "site": site, "probed_at": time.time()}
        write_atomic(record, json_bytes(body))


@dataclass(frozen=True, kw_only=True)
class CampaignPin:
    """``<output>/_campaign/campaign.json``: what every site of a campaign must share
    beyond ``run.json`` (how long a lease lasts: a site with a shorter one would take
    leases over early). Created by the first site that plans, with ``If-None-Match``."""

    lease_seconds: float
    first_site: str

    def to_json(self) -> bytes:
        """The record's bytes."""
        return json_bytes(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """The record; RecordError naming a field that is absent or of the wrong type."""
        return Fields.parse(raw, where).into(cls)


def _pinned(output: Location, campaign: CampaignSettings, *, create: bool) -> None:
    """Pin the campaign's lease length (the first site), or check it; ConfigError naming
    ``campaign.lease_seconds`` when this site's differs."""
    assert campaign.site is not None
    mine = CampaignPin(lease_seconds=float(campaign.lease_seconds), first_site=campaign.site)
    if create and output.create_if_absent(PIN, mine.to_json()):
        return
    try:
        pin = CampaignPin.from_json(output.read_bytes(PIN), output.url(PIN))
    except FileNotFoundError:
        return  # a dry run before the first plan: nothing pinned yet
    if pin.lease_seconds != mine.lease_seconds:
        msg = f"config campaign.lease_seconds: {mine.lease_seconds:g} on site {campaign.site!r}, "
        msg += f"but the campaign in {output.uri} pins {pin.lease_seconds:g} (site "
        msg += f"{pin.first_site!r} planned first; {output.url(PIN)}): every site must use the "
        raise ConfigError(msg + "same, or one would take the others' leases over early")


def order(site: str | None, shard: int, shards: int) -> int:
    """Where ``shard`` comes in ``site``'s order, as a Snakemake priority (higher first;
    0 without a campaign): a hash of the site and the shard, so two sites walk the shards
    in unrelated orders and meet on one rarely. Always at least 0: above the await jobs."""
    if site is None:
        return 0
    digest = hashlib.sha256(f"{site}\0{shard}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % max(1, shards * 16)


def awaited_path(run_dir: Path, shard: int) -> Path:
    """The await job's output for ``shard`` (the classify rule's input while it is held)."""
    return Path(run_dir) / AWAITED / f"{shard}.json"
