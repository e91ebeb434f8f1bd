"""``shardwise verify --repair`` and what verify advises: removing exactly the markers
that vouch for broken work, rewriting derived outputs from their sidecars, and the fix
lines (:class:`Advice`, decided from the report; the CLI only prints them).

Shard markers go before file markers, so an interruption never leaves a shard marked
done over a file without one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from shardwise.ops.verify.check import VerifyReport
from shardwise.run import (
    changes,
    context,
    freshness,
    journal,
    markers,
    outputs,
    plan,
    runjson,
    selection,
)
from shardwise.run import state as run_state
from shardwise.run.opened import OpenRun, open_run
from shardwise.store.location import Location


def repair(run_dir: Path, report: VerifyReport) -> list[str]:
    """Remove exactly the markers that vouch for broken work (so the next run relabels
    only those files), and rewrite broken derived outputs from their sidecars; a line per
    thing done. Shard markers go first, then the journal and snapshot, then file markers:
    an interruption anywhere never leaves a shard marked done over a file without one."""
    run_dir = Path(run_dir)
    ctx = open_run(run_dir)
    by_shard = _broken_by_shard(ctx, report)
    reset = markers.remove_shard_markers(run_dir, sorted(report.broken_shards | set(by_shard)))
    removed = [
        f"removed {markers.shard_marker_path(run_dir, s)} (shard {s} runs again)" for s in reset
    ]
    for shard, files in sorted(by_shard.items()):  # before the markers: jobs on object
        journal.forget(run_dir, shard, files)  # stores trust these two instead of them
        markers.forget_in_snapshot(run_dir, files)
    for rel in sorted(report.broken_files):
        ctx.output.remove(outputs.MARKER.rel(rel))
        removed.append(f"removed {ctx.output.url(outputs.MARKER.rel(rel))} (relabel {rel})")
    for rel in sorted(report.rebuild - report.broken_files):  # relabelled ones get new ones
        removed += [
            f"rewrote {url} from the sidecar"
            for url in outputs.rebuild(ctx.roots(), rel, ctx.settings.dolma_name)
        ]
    _take_identities(ctx, report.changed)  # relabelled as they are now
    for name in freshness.retire_stale(ctx) if report.broken_files else ():
        mix = selection.root(run_dir, name) / selection.MIX_YAML
        removed.append(
            f"retired {mix}: selection {name!r} read labels repaired now, so dolma mix "
            f"refuses it (`shardwise select --run-dir {run_dir} --name {name}` says what to do)"
        )
    return removed


def _broken_by_shard(ctx: OpenRun, report: VerifyReport) -> dict[int, set[str]]:
    """The broken files of each shard (by the plan)."""
    rows = ctx.plan_as_written.select(["file", "shard"]).to_pydict()
    shard_of = dict(zip(rows["file"], rows["shard"], strict=True))
    by_shard: dict[int, set[str]] = defaultdict(set)
    for rel in sorted(report.broken_files):
        if rel in shard_of:
            by_shard[shard_of[rel]].add(rel)
    return by_shard


def shards_to_reset(run_dir: Path, report: VerifyReport) -> list[int]:
    """The marked shards whose markers ``repair`` removes: broken ones, and those that
    hold a broken file."""
    ctx = open_run(Path(run_dir), settings_required=False)
    wanted = report.broken_shards | set(_broken_by_shard(ctx, report))
    return sorted(wanted & markers.done_shards(Path(run_dir)))


def accept_changed(run_dir: Path, report: VerifyReport) -> list[str]:
    """Keep the labels of input files changed in place, on purpose: the plan takes their
    new identity, so no view reports them again. Returns one line per file."""
    _take_identities(open_run(Path(run_dir), settings_required=False), report.changed)
    return [
        f"accepted {rel}: its labels stay (made from {a}, the file is now {b})"
        for rel, (a, b) in sorted(report.changed.items())
    ]


def _take_identities(ctx: OpenRun, changed: dict[str, tuple[str, str]]) -> None:
    """The plan records these files as they are now; changed.json forgets them."""
    if not changed:
        return
    now = {rel: b for rel, (_a, b) in changed.items()}
    table = plan.with_identities(ctx.plan_as_written, now)
    summary = plan.load_summary(ctx.run_dir)
    if summary is not None:
        plan.save(ctx.run_dir, table, summary)
    changes.forget(ctx.run_dir, set(changed))


def restore_run_json(run_dir: Path) -> list[str]:
    """Make the two run.json copies one again (``--repair``); the output root comes from
    ``settings.json``, so a damaged run-directory copy still finds the other."""
    output = context.recorded_output(Path(run_dir))
    if output is None:
        return []  # never planned by this version: nothing says where the other copy is
    return runjson.restore(Location(str(run_dir)), output, lambda: run_state.vouching(run_dir))


def repair_command(run_dir: Path) -> str:
    """The command that repairs a run (printed when verify finds broken markers)."""
    return f"shardwise verify --run-dir {run_dir} --repair"


@dataclass(frozen=True, kw_only=True)
class Advice:
    """What verify advises after its findings: ``lines`` to print in order; ``stop`` when
    nothing more can be advised (the findings were measured against a run.json copy that
    ``--repair`` replaces); ``broken`` files and shards whose markers ``--repair`` removes,
    ``rebuild`` labelled files whose derived outputs it rewrites."""

    lines: tuple[str, ...]
    stop: bool
    broken: int
    rebuild: int


def advise(run_dir: Path, report: VerifyReport, *, repairing: bool) -> Advice:
    """The fixes for ``report`` (``repairing``: ``--repair`` runs next, so its own fix is
    not advised, nor the copies it makes one)."""
    lines: list[str] = []
    broken = len(report.broken_files) + len(report.broken_shards)
    rebuild = len(report.rebuild - report.broken_files)
    if report.copies and not repairing:
        lines.append(f"fix: {report.copies}")
        if report.measured_on_replaced:  # what else it found may not hold under the other
            text = "note: the findings above were measured against the run directory's "
            lines.append(
                text + "run.json, which --repair replaces first: run verify again after it"
            )
            return Advice(lines=tuple(lines), stop=True, broken=broken, rebuild=rebuild)
    if report.inputs_gone or report.input_drift:
        gone = " --gone keep|remove" if report.inputs_gone or report.input_drift.get("gone") else ""
        text = f"fix: `shardwise plan --extend{gone} --configfile <config>` takes the input's "
        lines.append(
            text + "current file set into the run (new files are labelled, gone ones leave it)"
        )
    if not repairing and (broken or rebuild):
        lines.append(_repair_line(run_dir, report, broken=broken, rebuild=rebuild))
    return Advice(lines=tuple(lines), stop=False, broken=broken, rebuild=rebuild)


def _repair_line(run_dir: Path, report: VerifyReport, *, broken: int, rebuild: int) -> str:
    """``fix: `shardwise verify ... --repair` removes ...; and writes ...``."""
    fixes = []
    if broken:
        text = f"removes the markers of {len(report.broken_files)} broken file(s) and of "
        text += f"the {len(shards_to_reset(run_dir, report))} shard(s) that hold them, "
        fixes.append(text + "so the next snakemake run relabels only those files")
    if rebuild:
        text = f"writes the Dolma attributes of {rebuild} labelled file(s) again from their "
        fixes.append(text + "sidecars (nothing is relabelled)")
    return f"fix: `{repair_command(run_dir)}` " + "; and ".join(fixes)


def repaired_line(report: VerifyReport, advice: Advice) -> str:
    """What ``--repair`` leaves to do: relabel, or nothing; and the problems it cannot fix."""
    left = report.unrepairable
    if advice.broken:
        text = "repaired: run `snakemake` (with your profile) to relabel them"
    else:
        text = f"repaired: {advice.rebuild} file(s)' derived outputs rewritten, nothing to relabel"
    return text + (f"; {left} problem(s) above need another fix" if left else "")
