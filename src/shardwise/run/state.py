"""The run directory's own state beside run.json: the plan it pins (checked against the
assignment), which of two run.json copies the state vouches for, and where they disagree.
Views open a run through ``run/opened.py``."""

from pathlib import Path

import pyarrow as pa

from shardwise.errors import InputError, RecordError, RunMismatchError, ShardwiseError
from shardwise.run import markers, plan, runjson
from shardwise.store.location import Location


def read_plan(run_dir: Path, meta: runjson.RunMeta) -> pa.Table:
    """``plan.parquet`` in one chunk, if it is the plan of the assignment run.json pins
    (else RunMismatchError saying how to rebuild it)."""
    try:
        plan.check_matches(run_dir, meta)
        return plan.load(run_dir).combine_chunks()
    except InputError as exc:
        raise RunMismatchError(str(exc)) from exc


def vouching(run_dir: Path) -> runjson.Evidence:
    """What the run directory's own state says a run.json should pin (the plan's assignment
    and task set, the shard markers' assignment): of two copies, the one these agree with."""
    run_dir = Path(run_dir)
    summary = plan.load_summary_or_none(run_dir)
    made_under: dict[tuple[int, int], int] = {}
    for shard in markers.done_shards(run_dir):
        try:
            m = markers.read_shard_marker(run_dir, shard)
        except (OSError, RecordError):
            continue
        key = (m.total_shards, m.minimum_shard_index)
        made_under[key] = made_under.get(key, 0) + 1

    def against(meta: runjson.RunMeta) -> list[str]:
        found = [f"the plan has {m}" for m in summary.mismatch(meta)] if summary else []
        found += [
            f"{n:,} shard marker(s) were made under total_shards {t}, minimum {lo}"
            for (t, lo), n in sorted(made_under.items())
            if (t, lo) != (meta.total_shards, meta.minimum_shard_index)
        ]
        return found

    support = ["the plan"] if summary else []
    support += [f"{sum(made_under.values()):,} shard marker(s)"] if made_under else []
    return runjson.Evidence(against, " and ".join(support))


def output_copy(output: Location) -> runjson.Copy | None:
    """The output root's run.json as found; None when it cannot be read at all."""
    try:
        return runjson.read_copy(output)
    except (OSError, ShardwiseError):
        return None


def copy_to_keep(
    run_dir: Path, meta: runjson.RunMeta, theirs: runjson.Copy | None
) -> runjson.Trust | None:
    """Which run.json to keep when the output root's (``theirs``) disagrees with the run
    directory's (``meta``); None when they agree or it is unreadable."""
    if theirs is None or theirs.meta is None or not runjson.differences(meta, theirs.meta):
        return None
    ours = runjson.Copy(Location(str(run_dir)), meta)
    return runjson.trusted(ours, theirs, lambda: vouching(run_dir))


def copies_disagree(run_dir: Path, meta: runjson.RunMeta, theirs: runjson.Copy | None) -> str:
    """How the output root's run.json (``theirs``) disagrees with the run directory's
    (``meta``) and which to keep, in one line; "" when they agree or it is unreadable."""
    trust = copy_to_keep(run_dir, meta, theirs)
    if trust is None or theirs is None or theirs.meta is None:
        return ""
    diffs = runjson.differences(meta, theirs.meta)
    changed = "; ".join(f"{name} {a!r} -> {b!r}" for name, a, b in diffs)
    text = f"the two run.json copies disagree (run directory -> output root: {changed}); keep "
    text += f"the {trust.which} ({trust.why}): `shardwise verify --run-dir {run_dir} --repair` "
    return text + "restores the other from it"
