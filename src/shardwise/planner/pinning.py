"""run.json pinned (both copies): the run's contract made from the settings, checked
against what is pinned, refused with what to do, re-pinned while nothing is labelled."""

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from shardwise.classify.tokencount import TokenCounter
from shardwise.classify.tokenization import labelling
from shardwise.config import Settings
from shardwise.errors import RunMismatchError
from shardwise.planner import housekeeping
from shardwise.run import (
    drift,
    outputs,
    plan,
    runjson,
    state,
)
from shardwise.store.location import Location


def run_meta(settings: Settings, task_count: int, fingerprint: str) -> runjson.RunMeta:
    """The run.json this config pins for a task set of ``task_count`` tasks."""
    inp, classifiers = settings.input, settings.classifiers
    pinned = labelling(
        inp.id_field,
        inp.text_field,
        inp.url_field,
        settings.inference.max_length,
        (c["input"] for c in classifiers),
        count_tokenizer=_counter_identity(settings.count_tokenizer),
    )
    return runjson.RunMeta.new(
        total_shards=settings.total_shards,
        minimum_shard_index=settings.minimum_shard_index,
        files_per_task=inp.files_per_task,
        input_uri=inp.uri,
        output_uri=settings.output_uri,
        task_count=task_count,
        fingerprint=fingerprint,
        classifiers=[(c["name"], c["model"], c["input"]) for c in classifiers],
        labelling=pinned,
    )


def _counter_identity(source: str | None) -> str | None:
    """The content hash of ``domains.tokenizer`` (ModelError, before anything is
    pinned, when it cannot be loaded); loaded once per process and file version."""
    if source is None:
        return None
    try:
        version = (Path(source).expanduser() / "tokenizer.json").stat().st_mtime_ns
    except OSError:
        version = 0  # a hub id (or nothing there: loading says so)
    return _loaded_identity(source, version)


@functools.cache
def _loaded_identity(source: str, _version: int) -> str:
    return TokenCounter.load(source).identity


_NEVER_REPINNED = ("format_version",)


def pin(
    settings: Settings,
    meta: runjson.RunMeta,
    table: pa.Table,
    input_drift: drift.InputDrift | None,
    copies: tuple[runjson.Copy, runjson.Copy],
    *,
    repin: bool = False,
    say: Callable[[str], None],
) -> None:
    """Validate both run.json copies (as read), create where absent: both are checked
    before either is created, so a refused run writes nothing (``repin``: replaced)."""
    run_dir = settings.run_dir

    def task_change() -> tuple[int, int]:
        if plan.load_summary(run_dir) is None:
            return (meta.task_count, 0)
        old = plan.task_ids(plan.load(run_dir))
        new = plan.task_ids(table)
        return len(new - old), len(old - new)

    runjson.check_copies(  # damaged, or an interrupted re-pin or extension
        *copies, run_dir, repin=repin, evidence=lambda: state.vouching(run_dir)
    )
    absent: list[Location] = []
    changed: list[tuple[Location, runjson.RunMeta]] = []
    for copy in copies:
        existing = copy.meta
        if existing is None:
            absent.append(copy.loc)
            continue
        if not repin:
            hints = functools.partial(_refusal_hints, settings, existing, found=input_drift)
            runjson.check_same(existing, meta, copy.where, task_change, hints)
        elif runjson.differences(existing, meta):
            changed.append((copy.loc, existing))
    if changed:
        _repin(settings, meta, changed, say)
    elif repin:
        say("run.json already pins these settings: nothing to re-pin")
    for loc in reversed(absent):  # output first: it is shared with other clusters
        runjson.create_or_validate(loc, meta, task_change)


def _outputs_of(settings: Settings, pinned: list[runjson.RunMeta]) -> list[Location]:
    """The output roots a run has written (or would write) to: config's and pinned ones."""
    uris = dict.fromkeys([settings.output_uri, *(m.output_uri for m in pinned)])
    return [Location(uri, settings.storage) for uri in uris]


def _labelled(roots: list[Location]) -> list[str]:
    """Per-file markers under any of ``roots`` (one listing each): what is labelled, one
    marker per source file (a file labelled once and copied to a new root counts once)."""
    found: dict[str, str] = {}
    for loc in roots:
        for rel in sorted(outputs.marked(loc)):
            found.setdefault(rel, loc.url(outputs.MARKER.rel(rel)))
    return list(found.values())


def _refusal_hints(
    settings: Settings,
    pinned: runjson.RunMeta,
    diffs: list[tuple[str, Any, Any]],
    found: drift.InputDrift | None,
) -> list[str]:
    """How to go on from a refused run: extend it to the input's new file set, quarantine,
    or re-pin while nothing is labelled."""
    lines = []
    names = {name for name, _, _ in diffs}
    if found and names <= runjson.INPUT_SET_FIELDS:
        gone = "."
        if found.gone:
            gone = "; --gone keep leaves the outputs of gone files in place, --gone remove "
            gone += "deletes them (either way they leave the run)."
        lines = [
            f"The input changed since it was planned: {found.summary()}. The assignment is "
            f"per task, so no planned task moves: {drift.extend_command(found, '<this config>')} "
            "takes the new set into this run (new files join the shards the hash gives them; "
            f"nothing labelled is touched){gone}"
        ]
    if "fingerprint" in names:
        text = "A file that cannot be read or repaired can be left out of this run without "
        text += "changing the assignment: put it back (any content) and run `shardwise "
        text += f"quarantine --run-dir {settings.run_dir} FILE --reason TEXT`; once "
        lines.append(text + "quarantined it may be removed from the input.")
    if names <= runjson.INPUT_SET_FIELDS:
        if not found:
            text = "The plan holds the input's files, but run.json pins another task set: an "
            lines.append(text + "interrupted `shardwise plan --extend` leaves that; run it again.")
        return lines  # the input set alone changed: extending (or quarantine) is the way
    if any(name.startswith("labelling.") for name in names):
        text = "These settings change what a label means: one output holds labels of one "
        text += "set-up. Use a new output.uri (and run_dir) for a different set-up."
        lines.append(text)
    if names & set(_NEVER_REPINNED):
        return lines
    if settings.campaign.site is not None:  # a re-pin would change every site's pin
        text = f"config campaign.site {settings.campaign.site!r}: this output is a campaign's, "
        text += "pinned by the site that planned first; give this site the settings its run.json "
        text += "pins (each field named above), or use another output.uri (and run_dir) for a "
        lines.append(text + "campaign of its own")
        return lines
    labelled = _labelled(_outputs_of(settings, [pinned]))
    if labelled:
        return [
            *lines,
            f"{len(labelled):,} file(s) of this run are already labelled (e.g. "
            f"{labelled[0]}), so its pinned settings stay.",
        ]
    return [
        *lines,
        "Nothing of this run is labelled yet (no per-file .done marker in its "
        "output): `shardwise plan --repin --configfile <this config>` re-pins it with "
        "these settings.",
    ]


def _repin(
    settings: Settings,
    meta: runjson.RunMeta,
    changed: list[tuple[Location, runjson.RunMeta]],
    say: Callable[[str], None],
) -> None:
    """Replace the run.json copies that differ, if no file of the run is labelled yet; the
    old assignment's per-shard state goes (failure records set aside)."""
    labelled = _labelled(_outputs_of(settings, [old for _, old in changed]))
    if labelled:
        msg = f"cannot re-pin: {len(labelled):,} file(s) of this run are already labelled "
        msg += f"(e.g. {labelled[0]}); labels made under the pinned settings would mix with new "
        msg += "ones. Use a new run_dir and output.uri for the new settings."
        raise RunMismatchError(msg)
    for loc, old in changed:
        diffs = runjson.differences(old, meta)
        frozen = [name for name, _, _ in diffs if name in _NEVER_REPINNED]
        if frozen:
            msg = f"cannot re-pin {loc.url(runjson.RUN_JSON)}: {frozen} never change"
            raise RunMismatchError(msg)
        say(f"re-pinning {loc.url(runjson.RUN_JSON)} (nothing is labelled yet):")
        for line in runjson.change_lines(diffs):
            say(line)
    housekeeping.reset_run_state(settings.run_dir)
    for loc, _old in changed:
        runjson.replace(loc, meta)
