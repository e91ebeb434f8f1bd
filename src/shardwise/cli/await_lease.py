"""``shardwise await-lease``: wait while another site's live job holds a shard (the
workflow's ``await_lease`` rule in a campaign of several sites; docs/campaigns.md)."""

import argparse
import sys
import time
from pathlib import Path

from shardwise.cli.common import add_run_dir
from shardwise.run import sitelease
from shardwise.run.opened import open_run
from shardwise.store.atomic import json_bytes, write_atomic


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``await-lease``."""
    p = sub.add_parser(
        "await-lease",
        help="wait while another site holds a shard (the await_lease rule)",
        description="Wait until no live job of another site holds the shard's lease in the "
        "output bucket: it was released (the shard is then labelled) or nobody renewed it "
        "for campaign.lease_seconds (this site then takes it over). What the workflow runs "
        "before the shard job of a shard another site held when it planned.",
    )
    add_run_dir(p, "await-lease")
    p.add_argument("--shard", type=int, required=True, help="the logical shard")
    p.add_argument("--out", type=Path, required=True, help="the file to write when it is free")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Wait; write ``--out`` with why the shard is free."""
    ctx = open_run(args.run_dir)
    settings = ctx.settings.campaign
    started = time.monotonic()
    why = sitelease.await_free(
        ctx.output, settings, args.shard, sitelease.instance_id(args.run_dir)
    )
    waited = time.monotonic() - started
    print(f"shardwise: shard {args.shard}: {why} after {waited:.0f} s", file=sys.stderr)
    body = {"shard": args.shard, "why": why, "waited_s": round(waited, 1)}
    write_atomic(args.out, json_bytes(body))
    return 0
