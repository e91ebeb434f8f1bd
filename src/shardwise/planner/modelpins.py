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

from shardwise.classify.modelcheck import identities, pin_refusal
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


def respell(
    copies: tuple[runjson.Copy, runjson.Copy],
    meta: runjson.RunMeta,
    now: dict[str, ModelIdentity],
    *,
    shared: bool = False,
) -> tuple[tuple[runjson.Copy, runjson.Copy], list[str]]:
    """Where the config names a classifier's model otherwise than run.json (the pinned
    snapshot's directory, ``owner/name@<commit>``, a copy elsewhere) and that model is
    the pinned one (its content hashes, and its revision where both know one), run.json
    takes the new name: jobs load what it names, so the run goes on with the same model.
    Another model under a new name is left to ``check_same`` (refused as another run) or
    to a re-pin. ``shared``: the output root's copy is a campaign's, which every site
    reads with its own model paths: it is taken as renamed here but never rewritten, and
    only the run directory's copy (what this site's jobs load) takes the new name. The
    copies as they are now, and a line per classifier renamed."""
    said: dict[str, str] = {}
    found = list(copies)
    for i in (1, 0):  # the output root's first: it vouches for the labels
        pinned = found[i].meta
        if pinned is None or pinned.models is None:
            continue
        renamed = _renamed(pinned, meta)
        for name, old, new in renamed:
            have, want = now.get(name, ModelIdentity()), pinned.models.get(name)
            if want is None or not (want.content_hash and have.content_hash):
                return copies, []  # nothing to tell them by: check_same names the change
            if want.differences(have):
                return copies, []  # another model: check_same (or a re-pin) decides
            text = f"note: classifier {name!r} now names {new} (was {old}): the model "
            text += "run.json pins (the same content), so the run goes on with it"
            if not (shared and i == 1):
                said[name] = text
        if not renamed:
            continue
        respelled = replace(pinned, classifiers=meta.classifiers)
        if shared and i == 1:
            found[i] = replace(found[i], meta=respelled)  # compared as this site's, not written
        else:
            runjson.replace(found[i].loc, respelled)
            found[i] = runjson.read_copy(found[i].loc)
    return (found[0], found[1]), list(said.values())


def _renamed(pinned: runjson.RunMeta, meta: runjson.RunMeta) -> list[tuple[str, str, str]]:
    """(classifier, pinned model name, new name) where only the model's name differs;
    [] when the classifiers differ otherwise (``check_same`` names that)."""
    old, new = pinned.classifiers, meta.classifiers
    if [(n, i) for n, _m, i in old] != [(n, i) for n, _m, i in new]:
        return []
    return [(a[0], a[1], b[1]) for a, b in zip(old, new, strict=True) if a[1] != b[1]]


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
    raise RunMismatchError("\n".join(pin_refusal(n, models[n], d) for n, d in wrong.items()))


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
