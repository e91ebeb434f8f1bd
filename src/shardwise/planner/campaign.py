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

import dataclasses
import hashlib
import json
import logging
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Self

from shardwise.config import CampaignSettings, Settings
from shardwise.errors import ConfigError, RecordError
from shardwise.run import markers, outputs, ranges, sitelease, summaries
from shardwise.run.opened import OpenRun
from shardwise.run.plan import files_of_shard, files_per_shard
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic
from shardwise.store.lease import Leases, Seen, probe, unfit
from shardwise.store.location import Location

log = logging.getLogger("shardwise.planner.campaign")

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


@dataclass(frozen=True)
class BroughtIn:
    """What :func:`bring_in` took from the bucket into this run directory: shards another
    site finished, marked done here (``marked``), and finished shards whose label-count
    summary was rebuilt from their files' stats (``summarized``: kept by no site)."""

    marked: tuple[int, ...] = ()
    summarized: tuple[int, ...] = ()

    def lines(self, site: str | None) -> list[str]:
        """What the command says of it (nothing when nothing came in)."""
        if not self.marked and not self.summarized:
            return []
        text = f"campaign: site {site!r} brought in from the bucket "
        parts = []
        if self.marked:
            parts.append(f"{len(self.marked)} shard(s) other sites finished ({_r(self.marked)})")
        if self.summarized:
            parts.append(f"the label counts of {len(self.summarized)} shard(s) kept by no site, ")
            parts[-1] += f"from their files' stats ({_r(self.summarized)})"
        return [text + "; ".join(parts)]


def _r(shards: tuple[int, ...]) -> str:
    return ranges.compress(list(shards))


def bring_in(ctx: OpenRun) -> BroughtIn:
    """Make this site's run directory answer for the whole campaign (nothing without one):
    each shard another site finished (its marker and summary kept in the bucket by its
    job, ``sitelease.publish_shard``) is marked done here with that summary, and a finished
    shard without one (kept by no site: an older version, a store failure) gets it from its
    files' stats, the labels' own figures. What ``coverage``, ``verify``, ``domains``,
    ``select`` and the planner read then covers every site; each shard's marker says
    whose it is (``source`` ``campaign``: another site's job)."""
    if ctx.settings is None or ctx.settings.campaign.site is None:
        return BroughtIn()
    run_dir, table = ctx.run_dir, ctx.plan
    planned = files_per_shard(table)
    done = markers.done_shards(run_dir)
    summarized = summaries.summarized_shards(run_dir)
    kept = Location(ctx.output.url(sitelease.SHARDS), ctx.output.options)
    published = {int(rel.removesuffix(".json")) for rel, _ in kept.list_files()
                 if rel.removesuffix(".json").isdigit()}  # fmt: skip
    rows = table.select(["file", "shard"]).to_pydict()
    quarantined = ctx.quarantined
    left_out = Counter(
        s for f, s in zip(rows["file"], rows["shard"], strict=True) if f in quarantined
    )
    marked = []
    for shard in sorted(s for s in published - done if s in ctx.shards):
        where = ctx.output.url(sitelease.shard_rel(shard))
        try:
            marker = markers.ShardMarker.from_json(kept.read_bytes(f"{shard}.json"), where)
        except (RecordError, FileNotFoundError) as e:
            log.warning("campaign: %s left out (%s)", where, e)
            continue
        if marker.problems(shard, ctx.shards, planned.get(shard, 0)):
            continue  # another plan's: the planner's own checks say so
        if marker.quarantined != left_out.get(shard, 0):
            continue  # a file released (or quarantined) since: the shard's own job finishes it
        _take_summary(ctx, shard)
        ours = dataclasses.replace(marker, source="campaign")
        write_atomic(markers.shard_marker_path(run_dir, shard), ours.to_json())
        marked.append(shard)
    summarized |= summaries.summarized_shards(run_dir)
    missing = [
        s for s in sorted(markers.done_shards(run_dir)) if planned.get(s) and s not in summarized
    ]
    rebuilt = [s for s in missing if _summarize(ctx, s)]
    return BroughtIn(tuple(marked), tuple(rebuilt))


def _take_summary(ctx: OpenRun, shard: int) -> None:
    """Copy a finished shard's summary from the bucket, where its job kept it (if it did)."""
    try:
        body = ctx.output.read_bytes(sitelease.summary_rel(shard))
    except FileNotFoundError:
        return
    write_atomic(summaries.summary_path(ctx.run_dir, shard), body)


def _summarize(ctx: OpenRun, shard: int) -> bool:
    """Build a finished shard's summary from its files' stats in the bucket (checked
    against the run's pins); whether one was written."""
    files = files_of_shard(ctx.plan, shard).to_pydict()
    left_out = ctx.quarantined
    pairs = [
        (f, t) for f, t in zip(files["file"], files["task_id"], strict=True) if f not in left_out
    ]
    summaries.write_for_shard(
        ctx.run_dir,
        shard,
        pairs,
        lambda rel: ctx.output.read_bytes(outputs.STATS.rel(rel)),
        lambda rel, stats: outputs.stats_problems(stats, rel, ctx.meta.labelling, ctx.meta.models),
    )
    return summaries.summary_path(ctx.run_dir, shard).exists()
