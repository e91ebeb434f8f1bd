"""``coverage``'s campaign block: every site of a campaign seen from any one of them.

A site knows the others only through the bucket: the shard records they leave when they
finish a shard (``_campaign/done/``, ``run/sitelease.py``) and the leases their live jobs
renew (``_campaign/leases/``, ``store/lease.py``). Per site: shards finished, files its
jobs labelled, live jobs now, its pace over the last hour, and when it was last heard
from (its latest lease renewal, by the store's clock, else its latest finished shard).
"""

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shardwise.run import sitelease
from shardwise.run.context import read_settings
from shardwise.run.opened import open_run
from shardwise.store.lease import Leases, Seen

#: The window of a site's pace.
PACE_WINDOW_S = 3600.0


@dataclass(frozen=True)
class SiteRow:
    """One site's part of the campaign."""

    site: str
    shards_done: int
    files_labelled: int
    live_jobs: int
    shards_per_hour: float
    heard_s_ago: float | None


@dataclass(frozen=True)
class CampaignView:
    """The campaign as the bucket says it now, seen from ``this_site``."""

    this_site: str
    lease_seconds: float
    rows: tuple[SiteRow, ...]

    def lines(self) -> list[str]:
        """The console block."""
        out = [
            f"campaign (seen from site {self.this_site!r}; lease {self.lease_seconds:.0f} s): "
            "the figures above are the whole campaign's (what every site finished is brought "
            "into this run directory); this site's own are its row"
        ]
        for row in self.rows:
            heard = "never" if row.heard_s_ago is None else f"{row.heard_s_ago:.0f} s ago"
            mine = " (this site)" if row.site == self.this_site else ""
            out.append(
                f"  site {row.site}{mine}: {row.shards_done:,} shard(s) finished "
                f"({row.files_labelled:,} file(s) labelled), {row.live_jobs} live job(s), "
                f"{row.shards_per_hour:.1f} shard(s)/h over the last hour, heard from {heard}"
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        """``coverage --format json``'s ``campaign``."""
        return {
            "site": self.this_site,
            "lease_seconds": self.lease_seconds,
            "sites": [asdict(row) for row in self.rows],
        }


def view(run_dir: Path, now: datetime | None = None) -> CampaignView | None:
    """The campaign block of ``run_dir`` (None: not a campaign)."""
    settings = read_settings(run_dir)  # a view of an older run has none: not a campaign
    campaign = settings.campaign if settings is not None else None
    if campaign is None or campaign.site is None:
        return None  # one site: the output is not opened again (coverage has read it)
    ctx = open_run(run_dir)
    leases = Leases(ctx.output, campaign.lease_seconds)
    live = [s for s in leases.all_seen() if not leases.expired(s)]
    done = sitelease.read_done(ctx.output)
    at = now or datetime.now(UTC)
    sites = sorted({campaign.site} | {d.site for d in done} | {s.lease.site for s in live})
    rows = (_row(site, [d for d in done if d.site == site], live, at) for site in sites)
    return CampaignView(campaign.site, campaign.lease_seconds, tuple(rows))


def _row(site: str, done: list[sitelease.SiteDone], live: list[Seen], at: datetime) -> SiteRow:
    """One site's row: its finished shards (``done``), the live leases it holds."""
    ages = [(at - _when(d.finished_at)).total_seconds() for d in done]
    heard = [s.age_s for s in live if s.lease.site == site] or ages
    recent = [a for a in ages if a <= PACE_WINDOW_S]
    return SiteRow(
        site=site,
        shards_done=len(ages),
        files_labelled=sum(d.labelled for d in done),
        live_jobs=sum(s.lease.site == site for s in live),
        shards_per_hour=len(recent) * 3600.0 / PACE_WINDOW_S,
        heard_s_ago=max(0.0, min(heard)) if heard else None,
    )


def _when(stamp: str) -> datetime:
    """A record's time (its writer's clock, ISO 8601); naive ones are UTC."""
    parsed = datetime.fromisoformat(stamp)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
