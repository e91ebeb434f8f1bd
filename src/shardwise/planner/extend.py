"""``shardwise plan --extend``: a grown or shrunken input, taken into its pinned run.

The assignment is per task, so new files move no planned task: they form tasks of their
own, in the shards the hash gives them, which reopen (labelled files keep their markers).
Gone files leave the run, their outputs kept (``retired.json``) or removed. run.json keeps
the assignment, takes the new task set, and records an ``input_changes`` entry. The writes
are ordered so that an interruption anywhere leaves the old state (the next dry run says
to run this again) or the new one: retired.json, gone outputs, reopened shards, run.json
(output root first), the plan.
"""

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from shardwise.config import Settings
from shardwise.errors import RunMismatchError
from shardwise.planner import listing
from shardwise.planner.pinning import run_meta
from shardwise.planner.runlock import lock_run_dir
from shardwise.run import (
    context,
    drift,
    journal,
    markers,
    opened,
    outputs,
    plan,
    quarantine,
    retired,
    runjson,
    selection,
)
from shardwise.run.manifest import build_tasks
from shardwise.store.location import Location

GONE = ("keep", "remove")


@dataclass(frozen=True, kw_only=True)
class Extension:
    """What one extension did (or, all empty, that there was nothing to take in)."""

    added: tuple[str, ...] = ()  # files
    gone: tuple[str, ...] = ()
    tasks_added: int = 0
    tasks_removed: int = 0
    reopened: tuple[int, ...] = ()  # shards whose markers were removed
    settled: tuple[int, ...] = ()  # of those, the ones with every remaining file labelled
    removed: tuple[str, ...] = ()  # output URLs deleted (gone="remove")
    kept: tuple[str, ...] = ()  # gone files whose outputs stay (gone="keep")
    stale_selections: tuple[str, ...] = ()  # whose mix configs now stop dolma

    def change_text(self) -> str:
        """What changed, in the words a stale selection repeats."""
        return change_words(len(self.added), len(self.gone), "file")

    def lines(self) -> list[str]:
        """What the operator reads."""
        if not (self.added or self.gone):
            return ["the input holds the planned files: nothing to take in"]
        text = f"extended: {len(self.added):,} file(s) added in {self.tasks_added:,} new task(s), "
        text += f"{len(self.gone):,} planned file(s) gone ({self.tasks_removed:,} task(s) left "
        text += f"the run); {len(self.reopened) - len(self.settled):,} shard(s) reopened"
        if self.settled:
            text += f", {len(self.settled):,} with nothing left to label (every file they keep "
            text += "is labelled: the next run marks them done again, labelling nothing)"
        out = [text]
        if self.kept:
            out.append(f"kept the outputs of {len(self.kept):,} gone file(s) (retired.json)")
        if self.removed:
            out.append(f"removed {len(self.removed):,} output(s) of gone files")
        if self.stale_selections:
            names = ", ".join(self.stale_selections)
            text = f"selection(s) {names} were made before this change: their mix.yaml now "
            text += "stops dolma (the config as it was: mix.yaml.stale); select anew"
            out.append(text)
        return out


def change_words(added: int, removed: int, what: str) -> str:
    """``2 files removed``, ``3 files added``, ``3 files added and 2 removed``."""
    parts = []
    if added:
        parts.append(f"{added:,} {what}(s) added")
    if removed:
        parts.append(f"{removed:,} {what}(s) removed" if not added else f"{removed:,} removed")
    return " and ".join(parts) or f"no {what} added or removed"


def extend(config: dict[str, Any], *, gone: str | None = None) -> Extension:
    """Take the input's current file set into the pinned run of ``config``."""
    settings = Settings.from_config(config)
    run_dir = settings.run_dir
    not_planned = f"{run_dir} is not planned yet: a dry run (`snakemake -n`) plans and pins it"
    if not run_dir.is_dir():
        raise RunMismatchError(not_planned)
    lock_run_dir(run_dir)
    source, output = context.open_roots(settings)
    copies = (runjson.read_copy(Location(str(run_dir))), runjson.read_copy(output))
    runjson.check_copies(*copies, run_dir, repin=True)  # a damaged copy is refused here
    pinned = [c for c in copies if c.meta is not None]
    cached = plan.load_summary(run_dir)
    if not pinned or cached is None:
        raise RunMismatchError(not_planned)
    old = plan.load(run_dir)
    quarantined = set(quarantine.load(run_dir))
    listed = listing.list_input(settings, source, output)
    table, added, gone_files = _extended(old, listed, settings, quarantined)
    inp = settings.input
    assignment = (settings.total_shards, settings.minimum_shard_index, inp.files_per_task)
    summary = plan.summarize(table, *assignment)
    meta = run_meta(settings, summary.tasks, summary.fingerprint)
    _check_only_the_input(pinned, meta, run_dir)
    roots = opened.open_run(run_dir).roots()
    labelled = _with_outputs(roots, gone_files)
    if labelled and gone is None:
        shown = ", ".join(repr(f) for f in labelled[:5]) + (", ..." if len(labelled) > 5 else "")
        msg = f"{len(labelled):,} planned file(s) that are gone from the input have outputs "
        msg += f"({shown}): say what becomes of them: --gone keep leaves them in place, "
        msg += "--gone remove deletes them (either way the files leave the run)"
        raise RunMismatchError(msg)
    fingerprints = {cached.fingerprint, *(c.meta.fingerprint if c.meta else None for c in copies)}
    if not (added or gone_files) and fingerprints == {summary.fingerprint}:
        return Extension()  # nothing to take in (or an earlier extension finished)
    old_tasks, new_tasks = plan.task_ids(old), plan.task_ids(table)
    change = runjson.InputChange(
        at=markers.now(),
        tasks_added=len(new_tasks - old_tasks),
        tasks_removed=len(old_tasks - new_tasks),
        task_count=summary.tasks,
        fingerprint=summary.fingerprint,
        gone_outputs=(gone or "") if labelled else "",
    )
    reopened = _reopened(old, table, added, gone_files)
    done = Extension(
        added=tuple(added),
        gone=tuple(gone_files),
        tasks_added=change.tasks_added,
        tasks_removed=change.tasks_removed,
        reopened=tuple(reopened),
        settled=tuple(_settled(table, reopened, added, output)),
        kept=tuple(labelled) if gone == "keep" else (),
    )
    removed = _apply(run_dir, roots, done, labelled, gone)
    for copy in (copies[1], copies[0]):  # the output root's first: it vouches for labels
        runjson.replace(copy.loc, _with_history(copy.meta or pinned[0].meta, meta, change))
    plan.save(run_dir, table, summary)
    drift.record(run_dir, drift.InputDrift())
    retired = selection.retire_mix_configs(run_dir, done.change_text())
    return replace(done, removed=tuple(removed), stale_selections=tuple(retired))


def _extended(
    old: pa.Table, listed: listing.Listed, settings: Settings, quarantined: set[str]
) -> tuple[pa.Table, list[str], list[str]]:
    """The plan of the listed files: planned rows kept as they are (their tasks and
    shards unchanged), new files in tasks of their own; gone rows dropped (a quarantined
    file stays planned, as a dry run keeps it)."""
    sizes = dict(listed.files)
    planned = set(old["file"].to_pylist())
    added = sorted(set(sizes) - planned)
    gone = sorted(planned - set(sizes) - quarantined)
    keep = pc.invert(pc.is_in(old["file"], value_set=pa.array(gone, pa.string())))
    inp = settings.input
    new = plan.build(
        [(rel, sizes[rel]) for rel in added],
        files_per_task=inp.files_per_task,
        total_shards=settings.total_shards,
        minimum_shard_index=settings.minimum_shard_index,
        category_regex=inp.category_regex,
        tasks=build_tasks(added, inp.files_per_task),
        versions=listed.versions,
    )
    table = pa.concat_tables([old.filter(keep), new]).sort_by("file")
    return table, added, gone


def _check_only_the_input(pinned: list[runjson.Copy], meta: runjson.RunMeta, run_dir: Path) -> None:
    """Refuse an extension by a config that changes anything but the input set."""
    for copy in pinned:
        diffs = runjson.differences(copy.meta, meta) if copy.meta is not None else []
        other = [d for d in diffs if d[0] not in runjson.INPUT_SET_FIELDS]
        if other:
            head = f"{copy.where} pins other settings than this config; --extend takes in only "
            lines = [head + "a changed input set:", *runjson.change_lines(other)]
            lines.append(f"Restore them in the config (the run in {run_dir} keeps its set-up).")
            raise RunMismatchError("\n".join(lines))


def _with_outputs(roots: dict[str, Location], files: list[str]) -> list[str]:
    """Which of ``files`` have any output (one listing of each root)."""
    if not files:
        return []
    found = outputs.scan_roots(roots)
    return [f for f in files if any(f in found.of(kind) for kind in outputs.kinds())]


def _shards_of(t: pa.Table, files: list[str]) -> set[int]:
    rows = t.filter(pc.is_in(t["file"], value_set=pa.array(files, pa.string())))
    return set(rows["shard"].to_pylist())


def _reopened(old: pa.Table, table: pa.Table, added: list[str], gone: list[str]) -> list[int]:
    """Shards that gain a file or lose one: their markers no longer vouch for them."""
    return sorted(_shards_of(table, added) | _shards_of(old, gone))


def _settled(table: pa.Table, reopened: list[int], added: list[str], output: Location) -> list[int]:
    """The reopened shards with nothing left to label: they gained no file and every
    file they keep is labelled (one listing of the output, only when there are any)."""
    candidates = sorted(set(reopened) - _shards_of(table, added))
    if not candidates:
        return []
    rows = table.filter(
        pc.is_in(table["shard"], value_set=pa.array(candidates, table["shard"].type))
    )
    marked = outputs.marked(output)
    open_ = {
        s
        for f, s in zip(rows["file"].to_pylist(), rows["shard"].to_pylist(), strict=True)
        if f not in marked
    }
    return [s for s in candidates if s not in open_]


def _apply(
    run_dir: Path,
    roots: dict[str, Location],
    done: Extension,
    labelled: list[str],
    gone: str | None,
) -> list[str]:
    """The changes before run.json's: the gone files' record or outputs, reopened shards."""
    if labelled and gone == "keep":
        retired.add(run_dir, labelled)
    removed: list[str] = []
    if labelled and gone == "remove":
        for rel in labelled:
            removed += outputs.remove_all(roots, rel)
        removed += selection.remove_gone(run_dir, roots.get("attributes"), labelled)
    if done.gone:
        markers.forget_in_snapshot(run_dir, set(done.gone))
        for shard in done.reopened:
            journal.forget(run_dir, shard, set(done.gone))
    markers.remove_shard_markers(run_dir, done.reopened)
    return removed


def _with_history(
    old: runjson.RunMeta, new: runjson.RunMeta, change: runjson.InputChange
) -> runjson.RunMeta:
    """``new`` with ``old``'s creation stamp and history, plus ``change`` (once: an
    extension run again after an interruption does not record itself twice)."""
    history = old.input_changes
    if not history or history[-1].fingerprint != change.fingerprint:
        history = (*history, change)
    created = {"created_at": old.created_at, "shardwise_version": old.shardwise_version}
    return replace(new, **created, input_changes=history)
