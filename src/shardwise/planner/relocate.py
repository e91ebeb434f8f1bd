"""Move a run's output to another root: checked first, then re-pinned in one order.

The output root is pinned, so a config with another ``output.uri`` is refused. After the
operator copies the output (``rsync -a``, ``aws s3 sync``), relocate checks, before writing
anything, that the new root holds every file of the old one (path and size) and the same
run.json, then re-pins: the new root's run.json first (it vouches for the labels there),
the run directory's, settings.json. Run again, it finishes an interrupted relocate.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from shardwise.config import StorageOptions
from shardwise.errors import RunMismatchError
from shardwise.run import context, runjson
from shardwise.store.atomic import is_temp_name
from shardwise.store.location import Location

#: Files of the old root named in a refusal (the count says how many in all).
_SHOWN = 5


@dataclass(frozen=True)
class Relocation:
    """What a relocate found and did."""

    old: str
    new: str
    files: int  # files of the old root found in the new one
    lines: tuple[str, ...]  # one per file written


def relocate(run_dir: Path, new_uri: str, options: StorageOptions | None = None) -> Relocation:
    """Re-pin the run in ``run_dir`` to the output root ``new_uri`` (see the module doc)."""
    run_dir = Path(run_dir)
    settings = context.read_settings(run_dir)
    if options is None:
        options = settings.storage if settings is not None else StorageOptions()
    local = Location(str(run_dir))
    meta = runjson.read_run_dir(run_dir)
    new = Location(new_uri, options)
    old = context.output_location(run_dir, meta)
    if context.resolved_uri(new) == context.resolved_uri(old):
        msg = f"{new_uri} is already the run's output root ({meta.output_uri}): nothing to move"
        raise RunMismatchError(msg)
    copied = _check_copy(old, new, meta)
    moved = dataclasses.replace(meta, output_uri=new_uri)
    lines = []
    runjson.replace(new, moved)  # first: it vouches for the labels
    lines.append(f"wrote {new.url(runjson.RUN_JSON)} (output_uri: {new_uri})")
    runjson.replace(local, moved)
    lines.append(f"wrote {local.url(runjson.RUN_JSON)} (output_uri: {new_uri})")
    if settings is not None:
        context.write_settings(run_dir, settings.with_output(new))
        resolved = context.resolved_uri(new)
        lines.append(f"wrote {run_dir / context.SETTINGS_JSON} (output root: {resolved})")
    return Relocation(meta.output_uri, new_uri, copied, tuple(lines))


def _check_copy(old: Location, new: Location, meta: runjson.RunMeta) -> int:
    """Every file of ``old`` is in ``new`` with its size, and ``new`` pins this run; the
    number of files checked. RunMismatchError naming what is missing; nothing written."""
    theirs = dict(new.list_files())
    if not theirs:
        msg = f"{new.uri} holds no files: copy the output there first (e.g. `rsync -a "
        msg += f"{old.uri}/ {new.uri}/` or `aws s3 sync {old.uri} {new.uri}`), then run this again"
        raise RunMismatchError(msg)
    ours = {rel: size for rel, size in old.list_files() if not is_temp_name(Path(rel).name)}
    missing = sorted(rel for rel in ours if rel not in theirs)
    differ = sorted(rel for rel in ours if rel in theirs and theirs[rel] != ours[rel])
    differ = [rel for rel in differ if rel != runjson.RUN_JSON]  # a resumed relocate
    if missing or differ:
        shown = ", ".join((missing + differ)[:_SHOWN])
        msg = f"{new.uri} is not a complete copy of {old.uri}: {len(missing):,} file(s) missing "
        msg += f"and {len(differ):,} of another size (e.g. {shown}). Finish the copy, then run "
        raise RunMismatchError(msg + "this again; nothing was changed")
    copy = runjson.read_copy(new)
    if copy.meta is not None:
        moved = dataclasses.replace(meta, output_uri=copy.meta.output_uri)
        diffs = runjson.differences(copy.meta, moved)
        if diffs:
            lines = runjson.change_lines(diffs)
            msg = f"{copy.where} pins another run than {meta.output_uri}'s:\n" + "\n".join(lines)
            raise RunMismatchError(msg)
    return len(ours)
