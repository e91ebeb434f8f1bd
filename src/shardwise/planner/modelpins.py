"""Pin each classifier's model identity in run.json, and refuse a model that changed.

At planning (every dry run and run start, the top-level process): a run without a pin
gets one (the models as they are while nothing is labelled; from its files' stats once
something is, naming the files of another model); a run with one has each classifier's
model compared with it: while nothing is labelled a change is re-pinned and said, once
anything is it is refused in one line per classifier (``run/modelpin.py``). "Labelled"
is what ``plan --repin`` asks too: a per-file marker in the output (one listing, made
only when the answer matters). Jobs check the same before they label
(``classify/shard_job.py``), so no file of an output is labelled with another model
than its run.json names.
"""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from shardwise.classify.modelcheck import identities
from shardwise.errors import RecordError, RunMismatchError
from shardwise.run import modelpin, outputs, runjson
from shardwise.run.filestats import FileStats
from shardwise.run.modelpin import ModelIdentity
from shardwise.store.location import Location


def current_models(meta: runjson.RunMeta) -> dict[str, ModelIdentity]:
    """Each classifier's model identity as it is now (each model path hashed once)."""
    return identities(meta.classifiers)


def initial(
    now: dict[str, ModelIdentity], copies: tuple[runjson.Copy, runjson.Copy]
) -> dict[str, ModelIdentity] | None:
    """The models a run.json created now pins, from the (run directory, output root)
    copies as read: a new run's as they are (``now``: so its first write is its only one);
    where a copy exists, its pin (the output root's first: it vouches for the labels),
    None for a run pinned before models were (:func:`check_and_pin` derives it from the
    files)."""
    found = [c.meta for c in reversed(copies) if c.meta is not None]
    if not found:
        return modelpin.pins(now)
    return found[0].models


def check_and_pin(run_dir: Path, output: Location, now: dict[str, ModelIdentity]) -> list[str]:
    """Pin or compare the models (module docstring) with ``now``, the models as they are;
    the lines to say. RunMismatchError when a model changed under a run that has labelled
    files. The output is listed only where the answer depends on it (no pin yet, or a
    model that changed)."""
    meta = runjson.read_run_dir(run_dir)
    if meta.models is None:
        labelled = sorted(outputs.marked(output))
        if not labelled:
            _write(run_dir, output, replace(meta, models=modelpin.pins(now)))
            return []
        pins, mixed = modelpin.derive(_stats_models(output, labelled), now)
        _write(run_dir, output, replace(meta, models=pins))
        return [_mixed_line(run_dir, name, files) for name, files in mixed.items()]
    wrong = modelpin.mismatched(meta.models, now)
    if not wrong:
        return []
    models = {name: model for name, model, _ in meta.classifiers}
    if not outputs.marked(output):
        _write(run_dir, output, replace(meta, models={**meta.models, **modelpin.pins(now)}))
        names = ", ".join(repr(n) for n in wrong)
        return [f"note: re-pinned the model of {names}: it changed, and nothing is labelled yet"]
    raise RunMismatchError("\n".join(modelpin.refusal(n, models[n], d) for n, d in wrong.items()))


def _stats_models(
    output: Location, files: list[str]
) -> Iterator[tuple[str, dict[str, ModelIdentity]]]:
    """(file, the models its stats record) for each labelled file whose stats read."""

    def one(rel: str) -> tuple[str, dict[str, ModelIdentity]] | None:
        try:
            raw = output.read_bytes(outputs.STATS.rel(rel))
            return rel, dict(FileStats.from_json(raw, rel).models)
        except (OSError, RecordError):
            return None

    with ThreadPoolExecutor(max_workers=8) as pool:
        yield from (got for got in pool.map(one, files) if got is not None)


def _mixed_line(run_dir: Path, name: str, files: list[str]) -> str:
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3:,} more" if len(files) > 3 else "")
    text = f"note: pinned the {name!r} model this run's files were labelled with; "
    text += f"{len(files):,} file(s) were labelled with another ({shown}): "
    return text + f"`shardwise verify --run-dir {run_dir} --repair` relabels them"


def _write(run_dir: Path, output: Location, meta: runjson.RunMeta) -> None:
    """Both run.json copies, the output root's first (it vouches for the labels)."""
    for loc in (output, Location(str(run_dir))):
        runjson.replace(loc, meta)
