"""One listing of the input, taken apart into the run's inputs and everything else.

Every file ``input.glob`` matches is an input, a shardwise output, hidden, unsafe to
name an output after, or of another format: each kind but the inputs is said in a
note (and recorded for coverage, ``skipped.json``), never left out in silence.
"""

from dataclasses import dataclass
from pathlib import Path

from shardwise.config import Settings
from shardwise.errors import ConfigError, InputError
from shardwise.run import skipped
from shardwise.run.manifest import Selection, select_files
from shardwise.run.reader import SUFFIX_LIST
from shardwise.store.location import Location


@dataclass(frozen=True)
class Listed:
    """The inputs of one listing, what it said of each file's content, and its notes."""

    files: list[tuple[str, int]]  # (rel, size), sorted
    versions: dict[str, str]  # rel -> mtime (ns) or ETag
    notes: list[str]


def list_input(settings: Settings, source: Location, output: Location) -> Listed:
    """List ``source`` once; InputError (with what was found) when no file is an input."""
    entries = source.list_entries()
    if not entries:
        raise InputError(_empty_input_message(source))
    inp = settings.input
    selection = select_files(
        [(rel, size) for rel, size, _version in entries],
        glob=inp.glob,
        fmt=inp.format,
        output_prefix=source.inner_prefix(output),
        other_roots=_inner(source, settings),
        skip_unsafe=inp.skip_unsafe_names,
    )
    notes = _selection_notes(selection, output)
    if not selection.files:
        left_out = skipped.Skipped.of(selection.other).lines(settings.input.format)
        msg = f"no input files under {settings.input.uri} match glob {settings.input.glob!r} "
        msg += f"and format {settings.input.format!r} ({SUFFIX_LIST}); "
        msg += f"{len(entries):,} file(s) listed" + "".join(f"; {n}" for n in notes + left_out)
        raise InputError(msg)
    skipped.record(settings.run_dir, selection.other)  # coverage says so, on every view
    versions = {rel: version for rel, _size, version in entries}
    return Listed(selection.files, versions, notes)


def _inner(source: Location, settings: Settings) -> tuple[str, ...]:
    """Where the run's other roots (Dolma attributes) lie inside the input root."""
    if settings.dolma is None:
        return ()
    inner = source.inner_prefix(Location(settings.dolma.uri, settings.storage))
    if inner == "":
        msg = f"config output.dolma.uri {settings.dolma.uri!r} is the input root itself: the "
        msg += "attributes would be read as documents. Use a folder beside the documents"
        raise ConfigError(msg)
    return () if inner is None else (inner,)


def _empty_input_message(source: Location) -> str:
    """Why a listing came back empty, in the terms of the config (input.uri)."""
    if source.remote:
        text = f"nothing under input.uri {source.uri}: check the bucket and prefix, and that "
        return text + "the credentials may list it"
    root = Path(source.root)
    if not root.exists():
        text = f"input.uri {source.uri}: the folder {root} does not exist "
        return text + f"(relative paths are relative to the working directory, {Path.cwd()})"
    if not root.is_dir():
        return f"input.uri {source.uri}: {root} is a file, not a folder"
    return f"input.uri {source.uri}: the folder {root} holds no files"


def _selection_notes(selection: Selection, output: Location, limit: int = 5) -> list[str]:
    """What the listing held that is not an input, one line per reason (never silent)."""
    notes = []
    if selection.hidden:
        text = f"skipped {len(selection.hidden):,} hidden file(s) (names starting with '.' or "
        notes.append(text + f"'_', e.g. {selection.hidden[0]!r})")
    if selection.outputs:
        text = f"skipped {len(selection.outputs):,} shardwise output(s) under the output root "
        notes.append(text + f"{output.uri} (e.g. {selection.outputs[0]!r})")
    if selection.unsafe:
        shown = "; ".join(f"{rel!r}: {why}" for rel, why in selection.unsafe[:limit])
        hidden = len(selection.unsafe) - limit
        more = f"; ... and {hidden} more" if hidden > 0 else ""
        text = f"skipped {len(selection.unsafe):,} file(s) whose names cannot be used safely "
        notes.append(text + f"(input.skip_unsafe_names: true): {shown}{more}")
    return notes
