"""Files left out of a run on purpose: ``<run_dir>/quarantine.json``.

A broken file nobody can re-fetch would otherwise fail its shard forever, and removing it
changes the pinned input set. Quarantined, it stays in the plan (no task moves), gets no
labels, its shard can finish, and every view lists it apart with its reason. Releasing a
file reopens its shard, so the next ``snakemake`` labels it.

At a site of a campaign (``campaign.site``) the quarantine is the campaign's: each file
is one object in the bucket (``_campaign/quarantine/<hash>.json``: one per file, so two
sites never overwrite each other's edit), which every site's jobs and views read through
:func:`load`; the run directory's own file, from before it joined, still counts there
until its files are released.
"""

import contextlib
import difflib
import fcntl
import getpass
import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from shardwise.errors import ConfigError, InputError, RecordError
from shardwise.run import context, markers, outputs, plan, runjson
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic
from shardwise.store.location import Location

QUARANTINE_JSON = "quarantine.json"
FORMAT_VERSION = 1
_LOCK = ".quarantine.lock"


@dataclass(frozen=True)
class Entry:
    """One quarantined file: why, when, by whom."""

    file: str
    reason: str = ""
    at: str = ""
    by: str = ""


def from_json(raw: bytes, where: str) -> dict[str, Entry]:
    """The entries of a quarantine file; RecordError naming the file and the field when
    one is damaged."""
    f = Fields.parse(raw, where)
    f.dict("files")  # required
    files = f.sub("files")
    return {rel: files.sub(rel).into(Entry, file=rel) for rel in files.data}


def to_json(entries: dict[str, Entry]) -> bytes:
    """The quarantine file's bytes, files sorted."""
    files = {
        rel: {k: v for k, v in asdict(e).items() if k != "file"}
        for rel, e in sorted(entries.items())
    }
    return json_bytes({"format_version": FORMAT_VERSION, "files": files})


#: Where a campaign's quarantined files lie under the output root, one object each.
CAMPAIGN_PREFIX = "_campaign/quarantine"


def _campaign_output(run_dir: Path) -> Location | None:
    """The bucket of the campaign this run directory is a site of (None: no campaign)."""
    settings = context.read_settings(Path(run_dir))
    if settings is None or settings.campaign.site is None:
        return None
    return settings.locations(runjson.read_run_dir(Path(run_dir)))[1]


def entry_rel(rel: str) -> str:
    """Where a campaign's quarantine entry of ``rel`` lies (under the output root)."""
    return f"{CAMPAIGN_PREFIX}/{hashlib.sha256(rel.encode()).hexdigest()[:40]}.json"


def _entry_bytes(entry: Entry) -> bytes:
    return json_bytes({"format_version": FORMAT_VERSION, **asdict(entry)})


def _campaign_entries(output: Location) -> dict[str, Entry]:
    """The campaign's quarantine: one listing, one GET per file quarantined."""
    prefix = Location(output.url(CAMPAIGN_PREFIX), output.options)
    found: dict[str, Entry] = {}
    for name, _size in prefix.list_files():
        try:
            entry = Fields.parse(prefix.read_bytes(name), prefix.url(name)).into(Entry)
        except FileNotFoundError:
            continue  # released meanwhile
        except RecordError as e:
            msg = f"{e}; fix or remove it (it lists a file the campaign leaves out)"
            raise InputError(msg) from e
        found[entry.file] = entry
    return found


def load(run_dir: Path) -> dict[str, Entry]:
    """The run's quarantined files (``{}`` when there is none); at a site of a campaign,
    the campaign's too (a run directory's own file from before it joined still counts)."""
    local = _local(run_dir)
    output = _campaign_output(run_dir)
    return local if output is None else {**local, **_campaign_entries(output)}


def _local(run_dir: Path) -> dict[str, Entry]:
    """The run directory's own ``quarantine.json`` (``{}`` when there is none)."""
    path = Path(run_dir) / QUARANTINE_JSON
    try:
        return from_json(path.read_bytes(), str(path))
    except FileNotFoundError:
        return {}
    except (OSError, RecordError) as e:
        msg = f"{path} is not a readable quarantine file ({e}); "
        msg += "fix or remove it (it lists the files left out of this run)"
        raise InputError(msg) from e


def _save(run_dir: Path, entries: dict[str, Entry], changed: Iterable[str] = ()) -> None:
    """Keep ``entries``: the run directory's file, or at a campaign site each ``changed``
    file's object in the bucket (written when quarantined, removed when released)."""
    output = _campaign_output(run_dir)
    if output is None:
        write_atomic(Path(run_dir) / QUARANTINE_JSON, to_json(entries))
        return
    for rel in changed:
        if rel in entries:
            output.write_bytes(entry_rel(rel), _entry_bytes(entries[rel]))
        else:
            output.remove(entry_rel(rel))
    local = _local(run_dir)  # from before the run joined: a release takes it out there too
    if any(rel in local and rel not in entries for rel in changed):
        kept = {rel: e for rel, e in local.items() if rel in entries}
        write_atomic(Path(run_dir) / QUARANTINE_JSON, to_json(kept))


@contextlib.contextmanager
def _locked(run_dir: Path, how: int = fcntl.LOCK_EX) -> Iterator[None]:
    """One quarantine edit at a time (read, change, write); ``LOCK_SH``: a shard job
    vouching for a file (:func:`vouching`), beside other jobs, never beside an edit."""
    with (Path(run_dir) / _LOCK).open("a") as fh:
        try:
            fcntl.flock(fh, how)
        except OSError as e:  # a filesystem without locks: the edit is still checked
            if how == fcntl.LOCK_EX:
                raise InputError(f"{Path(run_dir) / _LOCK}: cannot lock it ({e})") from e
        yield


@contextlib.contextmanager
def vouching(run_dir: Path, rel: str) -> Iterator[bool]:
    """While a shard job writes the marker of ``rel``: True when the file is not
    quarantined (write the marker), False when it is (leave it unlabelled). A quarantine
    edit waits for it, and :func:`add` refuses a file with a marker under the same lock:
    a file is either quarantined or labelled, never both."""
    with _locked(run_dir, fcntl.LOCK_SH):
        yield rel not in load(run_dir)


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{os.uname().nodename}"


def resolve(names: Iterable[str], planned: Iterable[str], input_uri: str) -> list[str]:
    """Plan paths of ``names`` (as the plan writes them, or prefixed by the input root);
    unknown names are refused, each with the closest planned file."""
    known = set(planned)
    roots = [input_uri.rstrip("/") + "/"]
    if "://" not in input_uri:
        roots.append(str(Path(input_uri).absolute()).rstrip("/") + "/")
    resolved = [(name, _relative(name, roots)) for name in names]
    unknown = [name for name, rel in resolved if rel not in known]
    out = [rel for _name, rel in resolved if rel in known]
    if unknown:
        lines = [f"{len(unknown)} file(s) are not in this run's plan:"]
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.5)
            lines.append(f"  {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        lines.append(f"Name files relative to the input root {input_uri}, as the plan does.")
        raise ConfigError("\n".join(lines))
    return list(dict.fromkeys(out))


def _relative(name: str, roots: list[str]) -> str:
    """``name`` without the input root in front (as a URL, a path or an absolute path)."""
    spellings = [name] if "://" in name else [name, str(Path(name).absolute())]
    for root in roots:
        for text in spellings:
            if text.startswith(root):
                return text[len(root) :]
    return name


def add(run_dir: Path, names: Iterable[str], reason: str) -> list[Entry]:
    """Quarantine ``names``; refuses files that are already labelled (they have a marker)."""
    if not reason.strip():
        raise ConfigError("give a --reason: it is shown wherever the file is listed")
    run_dir = Path(run_dir)
    meta = runjson.read_run_dir(run_dir)
    files = resolve(names, plan.load(run_dir)["file"].to_pylist(), meta.input_uri)
    output = context.output_location(run_dir, meta)
    with _locked(run_dir):  # a job writing a marker holds it: labelled, or it sees this
        labelled = [rel for rel in files if output.exists(outputs.MARKER.rel(rel))]
        if labelled:
            msg = f"{len(labelled)} file(s) are already labelled: {', '.join(labelled)}; "
            msg += "there is nothing to leave out (if a labelled file's outputs are broken, "
            msg += f"`shardwise verify --run-dir {run_dir} --repair` relabels it)"
            raise ConfigError(msg)
        entries = load(run_dir)
        added = [Entry(rel, reason.strip(), markers.now(), _who()) for rel in files]
        entries.update({e.file: e for e in added})
        _save(run_dir, entries, files)
    return added


def release(run_dir: Path, names: Iterable[str]) -> tuple[list[str], list[int]]:
    """Take ``names`` out of the quarantine; the files released and the shards reopened.
    The shard markers go first: an interrupted release leaves quarantined files in open
    shards (run it again), never released files in a shard still marked done."""
    run_dir = Path(run_dir)
    meta = runjson.read_run_dir(run_dir)
    table = plan.load(run_dir)
    with _locked(run_dir):
        entries = load(run_dir)
        files = resolve(names, entries, meta.input_uri) if entries else []
        if not files:
            msg = f"none of {list(names)} is quarantined in {run_dir} (`--list` shows what is)"
            raise ConfigError(msg)
        rows = table.to_pydict()
        shards = sorted({s for f, s in zip(rows["file"], rows["shard"], strict=True) if f in files})
        reopened = markers.remove_shard_markers(run_dir, shards)
        for rel in files:
            del entries[rel]
        _save(run_dir, entries, files)
    return files, reopened


def to_dict(entries: dict[str, Entry]) -> dict[str, Any]:
    """``quarantine --list --format json`` (docs/schemas/quarantine.schema.json)."""
    shown = sorted(entries.values(), key=lambda e: e.file)
    return {"format_version": FORMAT_VERSION, "files": [asdict(e) for e in shown]}


def format_lines(entries: dict[str, Entry], *, limit: int | None = None) -> list[str]:
    """One line per quarantined file: name, reason, when and by whom."""
    shown = sorted(entries.values(), key=lambda e: e.file)
    lines = [f"{e.file}: {e.reason} ({e.at}, {e.by})" for e in shown[:limit]]
    if limit is not None and len(shown) > limit:
        lines.append(f"... and {len(shown) - limit} more (`shardwise quarantine --list`)")
    return lines
