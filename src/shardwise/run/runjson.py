"""run.json: the pinned contract of a logical run, created once and validated always.

It pins what decides where work goes and what it means (the assignment, the input's task
set, the output root, the classifiers and the labelling); a later run that differs is
refused before a job is submitted, naming each field. Create-or-validate, as in NeMo
Curator: if absent, create it without ever replacing; a writer that lost the race re-reads
and compares. Only ``plan --repin`` (nothing labelled) and ``relocate`` replace it.
"""

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from shardwise import __version__
from shardwise.errors import RecordError, RunMismatchError, StorageError
from shardwise.run.labelling import Labelling
from shardwise.run.modelpin import ModelIdentity
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes
from shardwise.store.location import Location

FORMAT_VERSION = 1
RUN_JSON = "run.json"
#: Fields recorded for information only; they may differ between runs.
INFO_FIELDS = ("created_at", "shardwise_version", "input_changes", "models")
#: The fields a changed input set alone changes (``shardwise plan --extend`` takes them
#: in under the same assignment).
INPUT_SET_FIELDS = frozenset({"task_count", "fingerprint"})


class DamagedError(RunMismatchError):
    """A run.json that cannot be parsed (truncated, overwritten)."""


def fingerprint(task_ids: Iterable[str]) -> str:
    """sha256 over the sorted task ids, newline-joined: equal iff the task set is equal."""
    h = hashlib.sha256()
    for tid in sorted(task_ids):
        h.update(tid.encode("utf-8") + b"\n")
    return h.hexdigest()


@dataclass(frozen=True, kw_only=True)
class InputChange:
    """One change of the input set taken in by ``shardwise plan --extend``."""

    at: str
    tasks_added: int
    tasks_removed: int
    task_count: int  # after the change
    fingerprint: str  # after the change
    gone_outputs: str = ""  # kept | removed | "" (no labelled file was gone)


@dataclass(frozen=True, kw_only=True)
class RunMeta:
    """The content of run.json."""

    format_version: int
    total_shards: int
    minimum_shard_index: int
    files_per_task: int
    input_uri: str
    output_uri: str
    task_count: int
    fingerprint: str
    classifiers: tuple[tuple[str, str, str], ...]  # (name, model, input)
    #: What else decides a label: the reader's fields, max_length, each input kind's
    #: template. None in a run.json written before it was pinned (then not compared).
    labelling: Labelling | None = None
    created_at: str = ""
    shardwise_version: str = ""
    #: Each extension of the input set, oldest first (the assignment never changes).
    input_changes: tuple[InputChange, ...] = ()
    #: Per classifier, what identifies the model it labels with (``run/modelpin.py``):
    #: pinned by the planner; None in a run.json written before (then derived from stats).
    models: dict[str, ModelIdentity] | None = None

    @classmethod
    def new(cls, **kw: Any) -> Self:
        """A fresh RunMeta stamped with the time and package version."""
        kw.setdefault("format_version", FORMAT_VERSION)
        kw.setdefault("created_at", datetime.now(UTC).isoformat(timespec="seconds"))
        kw.setdefault("shardwise_version", __version__)
        kw["classifiers"] = tuple(tuple(c) for c in kw["classifiers"])
        return cls(**kw)

    def to_json(self) -> bytes:
        """Stable JSON bytes; classifiers as objects for people reading the file."""
        data = asdict(self)
        data["classifiers"] = [{"name": n, "model": m, "input": i} for n, m, i in self.classifiers]
        if self.labelling is not None:
            data["labelling"] = self.labelling.to_json()
        if self.models is not None:
            data["models"] = {name: pin.to_json() for name, pin in self.models.items()}
        return json_bytes(data)

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Parse run.json bytes; a damaged field is refused by name (DamagedError)."""
        try:
            f = Fields.parse(raw, where)
            classifiers = tuple(
                (c.str("name"), c.str("model"), c.str("input")) for c in f.objects("classifiers")
            )
            changes = tuple(c.into(InputChange) for c in f.objects("input_changes", []))
            return f.into(cls, classifiers=classifiers, input_changes=changes)
        except RecordError as e:
            inner = e.where.removeprefix(where).strip()
            detail = f"{inner} {e.reason}" if inner else e.reason
            msg = f"{where} is damaged: not a valid shardwise run.json ({detail})"
            raise DamagedError(msg) from e


def differences(old: RunMeta, new: RunMeta) -> list[tuple[str, Any, Any]]:
    """Pinned fields whose values differ, as (field, old, new); each labelling setting on
    its own (``labelling.text_field``), and none when ``old`` pinned no labelling."""
    out: list[tuple[str, Any, Any]] = []
    for f in fields(RunMeta):
        a, b = getattr(old, f.name), getattr(new, f.name)
        if f.name in INFO_FIELDS or a == b:
            continue
        if f.name == "labelling":
            if a is None or b is None:
                continue  # a run.json from before labelling was pinned
            out += [(f"labelling.{k}", x, y) for k, x, y in a.differences(b)]
            continue
        out.append((f.name, a, b))
    return out


def change_lines(diffs: list[tuple[str, Any, Any]]) -> list[str]:
    """One line per differing pinned field: ``  name: old -> new``."""
    return [f"  {name}: {a!r} -> {b!r}" for name, a, b in diffs]


def check_same(
    old: RunMeta,
    new: RunMeta,
    where: str,
    task_change: Callable[[], tuple[int, int]] | None = None,
    hints: Callable[[list[tuple[str, Any, Any]]], list[str]] | None = None,
) -> None:
    """Raise RunMismatchError naming every differing field (and tasks added/removed);
    ``hints`` add how to go on (called only on a mismatch)."""
    diffs = differences(old, new)
    if not diffs:
        return
    lines = [f"{where} pins a different run; this run would change:", *change_lines(diffs)]
    if task_change is not None and any(n == "fingerprint" for n, _, _ in diffs):
        added, removed = task_change()
        lines.append(f"  input set changed: {added} task(s) added, {removed} removed")
    if hints is None or not {name for name, _, _ in diffs} <= INPUT_SET_FIELDS:
        # the input set alone may change under the same pin (plan --extend)
        one_run = "A run directory holds one logical run: use a new run_dir (and output) for a "
        lines.append(one_run + "new assignment, or restore the original settings and input.")
    if hints is not None:
        lines += hints(diffs)
    raise RunMismatchError("\n".join(lines))


def create_or_validate(
    loc: Location, meta: RunMeta, task_change: Callable[[], tuple[int, int]] | None = None
) -> RunMeta:
    """Return the pinned RunMeta at ``loc``/run.json, creating it from ``meta`` if absent."""
    where = loc.url(RUN_JSON)
    for _ in range(2):
        try:
            existing = RunMeta.from_json(loc.read_bytes(RUN_JSON), where)
        except FileNotFoundError:
            if loc.create_if_absent(RUN_JSON, meta.to_json()):
                return meta
            continue  # another writer won the race: read theirs and compare
        check_same(existing, meta, where, task_change)
        return existing
    raise StorageError(f"{where} vanished while being created; check the storage and retry")


def replace(loc: Location, meta: RunMeta) -> None:
    """Overwrite the run.json at ``loc``: only an explicit re-pin (``plan --repin``, while
    nothing is labelled) or ``relocate`` does; every other write is create-or-validate."""
    loc.write_bytes(RUN_JSON, meta.to_json())


def local_path(run_dir: Path) -> Path:
    """``<run_dir>/run.json``."""
    return Path(run_dir) / RUN_JSON


def read(loc: Location) -> RunMeta:
    """The pinned RunMeta (for jobs and reports); a clear error if there is none."""
    where = loc.url(RUN_JSON)
    try:
        raw = loc.read_bytes(RUN_JSON)
    except FileNotFoundError as e:
        msg = f"{where} not found: pass the original run directory (the one holding "
        msg += "run.json, plan.parquet and shards/), or plan the run first (`snakemake -n`)"
        raise RunMismatchError(msg) from e
    return RunMeta.from_json(raw, where)


def read_run_dir(run_dir: Path) -> RunMeta:
    """The run directory's run.json (the copy every view and job reads); a damaged one is
    refused with the command that restores it."""
    loc = Location(str(run_dir))
    try:
        return read(loc)
    except DamagedError as e:
        raise RunMismatchError(f"{e}. {RESTORE_HINT.format(run_dir=run_dir)}") from None


#: How to restore a damaged run.json from the other copy (verify's ``--repair``).
RESTORE_HINT = "`shardwise verify --run-dir {run_dir} --repair` restores it from the output root's "
RESTORE_HINT += "copy when that one is intact"


@dataclass(frozen=True)
class Copy:
    """One run.json copy as found: pinned, absent (``meta`` and ``damage`` None) or damaged."""

    loc: Location
    meta: RunMeta | None = None
    damage: str | None = None

    @property
    def where(self) -> str:
        return self.loc.url(RUN_JSON)


@dataclass(frozen=True)
class Evidence:
    """What the run directory's own state (plan, shard markers) says of a run.json."""

    against: Callable[[RunMeta], list[str]]  # how a copy disagrees with it, one line each
    support: str = ""  # what vouches ("the plan and 6 shard marker(s)"); "" when nothing


@dataclass(frozen=True)
class Trust:
    """Which of two disagreeing copies to keep, and why (in words)."""

    keep: Copy
    other: Copy
    why: str
    keeps_output: bool  # the output root's copy is the one to keep

    @property
    def which(self) -> str:
        """``output root's`` or ``run directory's``: the copy kept, in words."""
        return "output root's" if self.keeps_output else "run directory's"


def trusted(local: Copy, output: Copy, evidence: Callable[[], Evidence] | None = None) -> Trust:
    """The copy the evidence vouches for when it tells the two apart; else the output
    root's (it vouches for the labels there, and other clusters read it). ``evidence``
    is gathered only here, when two copies really disagree (it reads every shard marker)."""
    found = evidence() if evidence is not None and local.meta and output.meta else None
    if found is not None and found.support and local.meta and output.meta:
        ours, theirs = found.against(local.meta), found.against(output.meta)
        if not ours and theirs:
            why = f"{found.support} agree with it; with the other, {theirs[0]}"
            return Trust(local, output, why, keeps_output=False)
        if ours and not theirs:
            why = f"{found.support} agree with it; with the other, {ours[0]}"
            return Trust(output, local, why, keeps_output=True)
    why = "it vouches for the labels there (other clusters read it)"
    return Trust(output, local, why, keeps_output=True)


def read_copy(loc: Location) -> Copy:
    """The run.json at ``loc``, whatever state it is in (storage errors still raise)."""
    try:
        raw = loc.read_bytes(RUN_JSON)
    except FileNotFoundError:
        return Copy(loc)
    try:
        return Copy(loc, RunMeta.from_json(raw, loc.url(RUN_JSON)))
    except DamagedError as e:
        return Copy(loc, damage=str(e))


def check_copies(
    local: Copy,
    output: Copy,
    run_dir: Path,
    *,
    repin: bool = False,
    evidence: Callable[[], Evidence] | None = None,
) -> None:
    """Refuse, with the way forward, a damaged copy or two copies that disagree (what an
    interrupted re-pin or extension leaves: ``repin`` then finishes it, not refused)."""
    for bad, other in ((local, output), (output, local)):
        if bad.damage is None:
            continue
        fix = "No intact copy is left: if nothing of the run is labelled, delete it and plan "
        fix += "again; otherwise restore it from a backup (it pins the assignment the labels "
        fix += "were made under)."
        if other.meta is not None:
            fix = f"The copy at {other.where} is intact: `shardwise verify --run-dir {run_dir} "
            fix += "--repair` restores this one from it."
        raise DamagedError(f"{bad.damage}. {fix}")
    if repin or local.meta is None or output.meta is None:
        return
    diffs = differences(local.meta, output.meta)
    if not diffs:
        return
    trust = trusted(local, output, evidence)
    unfinished = "An interrupted `shardwise plan --extend` leaves them so: run it again"
    if not {name for name, _, _ in diffs} <= INPUT_SET_FIELDS:
        unfinished = "An interrupted `shardwise plan --repin` leaves them so: run it again to "
        unfinished += "finish it (possible while nothing is labelled)"
    head = f"the two run.json copies disagree (run directory -> output root: {local.where} -> "
    tail = f"{unfinished}. Otherwise keep the {trust.which} copy ({trust.why}): `shardwise verify "
    tail += f"--run-dir {run_dir} --repair` restores the other from it; then run with the "
    lines = [f"{head}{output.where}):", *change_lines(diffs), tail + "settings it pins."]
    raise RunMismatchError("\n".join(lines))


def restore(
    local: Location, output: Location, evidence: Callable[[], Evidence] | None = None
) -> list[str]:
    """Make the two copies one again (``verify --repair``): a damaged or absent copy from
    the intact one, of two that disagree the one ``trusted`` keeps; a line per copy written."""
    ours, theirs = read_copy(local), read_copy(output)
    if ours.meta is None and theirs.meta is None:
        if ours.damage or theirs.damage:
            check_copies(ours, theirs, Path(local.root))  # says what is left to do
        return []
    if ours.meta and theirs.meta and differences(ours.meta, theirs.meta):
        trust = trusted(ours, theirs, evidence)
        trust.other.loc.write_bytes(RUN_JSON, trust.keep.loc.read_bytes(RUN_JSON))
        return [
            f"restored {trust.other.where} from {trust.keep.where} (they disagreed; {trust.why})"
        ]
    for bad, good in ((ours, theirs), (theirs, ours)):
        if good.meta is not None and bad.meta is None:
            bad.loc.write_bytes(RUN_JSON, good.loc.read_bytes(RUN_JSON))
            how = "was damaged" if bad.damage else "was missing"
            return [f"restored {bad.where} from {good.where} (it {how})"]
    return []
