"""``shardwise quarantine``: leave broken files out of a run, list them, take them back."""

import argparse
import sys
from pathlib import Path

from shardwise.cli.common import add_format, add_run_dir, emit
from shardwise.run import claims, quarantine
from shardwise.run.opened import open_run


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``quarantine``."""
    parser = sub.add_parser(
        "quarantine",
        help="leave broken files out of a run (or list / release them)",
        description="Record files that are to be left out of this run, without changing "
        "the assignment of any other task: a quarantined file gets no sidecar, its shard "
        "can finish, and coverage, verify, retry-array, the report and the dry run list it "
        "apart from done and failed files. --release takes files back and reopens their "
        "shards so the next snakemake run labels them.",
    )
    add_run_dir(parser, "quarantine")
    parser.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="files relative to the input root (as the plan and error messages name them), "
        "or with the input root in front",
    )
    parser.add_argument("--reason", default="", help="why the files are left out (required)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="list the quarantined files")
    action.add_argument("--release", action="store_true", help="take FILEs out of the quarantine")
    add_format(parser, ("table", "json"), "output of --list: table (default) or json")
    parser.set_defaults(func=lambda args: run(parser, args))


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Add, list or release; usage errors exit 2 through ``parser.error``."""
    if args.list:
        entries = open_run(args.run_dir, settings_required=False).quarantined
        text = "\n".join(quarantine.format_lines(entries))
        emit(args.format, lambda: quarantine.to_dict(entries), lambda _fmt: text)
        if args.format != "json":
            print(f"{len(entries)} file(s) quarantined in {args.run_dir}", file=sys.stderr)
        return 0
    if not args.files:
        parser.error("name the FILE(s) to quarantine (or use --list)")
    if args.release:
        files, reopened = quarantine.release(args.run_dir, args.files)
        for rel in files:
            print(f"released {rel}")
        if reopened:
            text = f"reopened shard(s) {', '.join(map(str, reopened))}: the next `snakemake` run "
            print(text + "labels the released file(s)")
        return 0
    if not args.reason.strip():
        parser.error("--reason is required: it is shown wherever the file is listed")
    added = quarantine.add(args.run_dir, args.files, args.reason)
    for entry in added:
        print(f"quarantined {entry.file}: {entry.reason}")
    for line in _live_jobs(args.run_dir, [e.file for e in added]):
        print(line)
    text = "they get no sidecar; their shards can finish (run `snakemake` again); "
    print(text + f"`shardwise quarantine --run-dir {args.run_dir} --release FILE` takes one back")
    if (site := _site(args.run_dir)) is not None:
        text = f"campaign: site {site!r}: the quarantine is the campaign's (kept in the bucket): "
        text += "every site leaves these files out from its jobs' next file on, and a release "
        print(text + "at any site takes one back for all (its shard reopens at that site)")
    return 0


def _site(run_dir: Path) -> str | None:
    """This run directory's campaign site (None: not a campaign)."""
    settings = open_run(run_dir, settings_required=False).settings
    return settings.campaign.site if settings is not None else None


def _live_jobs(run_dir: Path, files: list[str]) -> list[str]:
    """A line per shard of ``files`` that a live job holds: what that job does now."""
    table = open_run(run_dir, settings_required=False).plan
    shards = dict(zip(table["file"].to_pylist(), table["shard"].to_pylist(), strict=True))
    held = claims.read_claims(run_dir)
    out = []
    for shard in sorted({shards[f] for f in files if shards[f] in held}):
        claim = held[shard]
        if claims.judge_now(claim).alive is False:
            continue
        text = f"shard {shard} is being labelled by {claim.holder()}: it leaves the file(s) out "
        text += "(it reads the quarantine before each file, and before each file's marker: a "
        out.append(text + "file is labelled or quarantined, never both)")
    return out
