"""Whether a selection still describes the labels it read.

Each shard record of a selection (``ShardSelection.read``) keeps the identity of every
labels file it took documents from: the sidecar's size and version (mtime locally, the
ETag on S3), as a stat gave it before the sidecar was read. One listing of the output
later says, per file, whether it is still so: a file relabelled, being relabelled (its
marker gone: ``verify --repair``), quarantined, or gone from the run makes the selection
stale, by name and cause. A stale selection's ``mix.yaml`` is kept refused by ``dolma mix``
(``selection.retire_mix_config``) by every command that finds it so.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shardwise.run import markers, plan, selection, sidecar
from shardwise.run.opened import OpenRun
from shardwise.run.selection import ShardSelection

#: Files named on the console line; the rest counted (``--format json`` has them all).
SHOWN = 5


class Cause:
    """Why a file a selection read no longer vouches for what it took (the words)."""

    LEFT = "left the run (plan --extend --gone)"
    QUARANTINED = "quarantined since"
    UNMARKED = "its marker is gone (repaired or being relabelled)"
    GONE = "its labels are gone"
    RELABELLED = "relabelled since"


@dataclass(frozen=True, kw_only=True)
class Freshness:
    """What changed under a selection: each changed file and its cause (shard records
    made before the identities were kept have nothing to compare: the run's fingerprint
    still says whether its input changed)."""

    changed: dict[str, str]

    @property
    def stale(self) -> bool:
        """A file it read no longer is what it read."""
        return bool(self.changed)

    def text(self) -> str:
        """``3 file(s) it read changed since: a.jsonl (relabelled since), ...``."""
        shown = [f"{rel} ({cause})" for rel, cause in sorted(self.changed.items())[:SHOWN]]
        more = len(self.changed) - SHOWN
        tail = f", and {more:,} more (all: --format json)" if more > 0 else ""
        return f"{len(self.changed):,} file(s) it read changed since: {', '.join(shown)}{tail}"


def compare(
    read: Mapping[str, str],
    now: Mapping[str, str],
    *,
    planned: set[str],
    quarantined: set[str],
) -> dict[str, str]:
    """Each file of ``read`` (rel -> identity when read) that changed, and why, given
    ``now`` (every output file -> identity, from one listing) and the run's plan and
    quarantine (pure)."""
    changed = {}
    for rel, identity in read.items():
        if rel not in planned:
            changed[rel] = Cause.LEFT
        elif rel in quarantined:
            changed[rel] = Cause.QUARANTINED
        elif rel + markers.FILE_MARKER_SUFFIX not in now:
            changed[rel] = Cause.UNMARKED
        elif rel + sidecar.SUFFIX not in now:
            changed[rel] = Cause.GONE
        elif now[rel + sidecar.SUFFIX] != identity:
            changed[rel] = Cause.RELABELLED
    return changed


def listing(ctx: OpenRun) -> dict[str, str]:
    """Every file of the output and its identity: one listing."""
    return {rel: plan.identity(size, v) for rel, size, v in ctx.output.list_entries()}


def check(
    ctx: OpenRun, got: Iterable[ShardSelection], now: Mapping[str, str] | None = None
) -> Freshness:
    """Whether the files the shard records ``got`` read are still as they read them."""
    read: dict[str, str] = {}
    for record in got:
        read.update(record.read or {})
    if not read:
        return Freshness(changed={})
    changed = compare(
        read,
        listing(ctx) if now is None else now,
        planned=set(ctx.plan["file"].to_pylist()),
        quarantined=set(ctx.quarantined),
    )
    return Freshness(changed=changed)


def retire_stale(ctx: OpenRun) -> list[str]:
    """Retire the mix config of every selection a file it read changed under (after a
    repair): ``dolma mix`` refuses it from now on. One listing for all; the selections
    retired."""
    live = [n for n in selection.names(ctx.run_dir) if selection.runnable_mix(ctx.run_dir, n)]
    if not live:
        return []
    now = listing(ctx)
    retired = []
    for name in live:
        sel = selection.load_plan(ctx.run_dir, name)
        found = check(ctx, selection.shard_records(ctx.run_dir, sel).values(), now) if sel else None
        if found is not None and found.stale:
            selection.retire_mix_config(ctx.run_dir, name, found.text())
            retired.append(name)
    return retired
