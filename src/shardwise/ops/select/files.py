"""``shardwise select``, pass 2: each labelled file's selection, from its sidecar alone.

Per file (a shard per Snakemake job, or threads here): the sidecar's ids, labels and token
counts give each document its domain's rate, and ``run/selection.py``'s stable hash its
copies; the file's selection (and Dolma repeat counts) is written, the shard's record after
every file. Memory holds one sidecar's columns at a time.
"""

import itertools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from shardwise.errors import ConfigError
from shardwise.run import dolma, outputs, plan, selection, sidecar, summaries
from shardwise.run.opened import OpenRun
from shardwise.run.selection import SelectionPlan, ShardSelection
from shardwise.store.atomic import write_atomic
from shardwise.store.location import Location


@dataclass(frozen=True, kw_only=True)
class FileSelection:
    """One file's documents: each one's domain (-1: none of the plan's), tokens, copies;
    ``identity``: its sidecar's as it was when read (``run/freshness.py``)."""

    rel: str
    identity: str
    ids: list[str | None]
    domain: np.ndarray  # int64
    tokens: np.ndarray  # int64
    repeats: np.ndarray  # int16
    json_ids: list[Any] | None = None  # the ids as the JSON wrote them (not all strings)


def attributes_root(ctx: OpenRun, name: str) -> Location | None:
    """Where the selection's Dolma attribute set lies: beside the labels' own set
    (``.../attributes/<name>``); None when the run writes no Dolma attributes."""
    if ctx.attributes is None:
        return None
    return selection.attribute_set(ctx.attributes, name)


def domain_of_rows(table: pa.Table, axes: Sequence[str], index: Mapping[tuple[str, ...], int]):
    """Each row's domain index (-1 where its labels are no domain of the plan)."""
    codes, names = [], []
    for axis in axes:
        enc = pc.dictionary_encode(table[f"{axis}_label"]).combine_chunks()
        codes.append(enc.indices.to_numpy(zero_copy_only=False).astype(np.int64))
        names.append(enc.dictionary.to_pylist())
    lookup = np.full([max(len(n), 1) for n in names], -1, np.int64)
    for combo in itertools.product(*(range(len(n)) for n in names)):
        lookup[combo] = index.get(tuple(n[i] for n, i in zip(names, combo, strict=True)), -1)
    return lookup[tuple(codes)] if table.num_rows else np.zeros(0, np.int64)


def select_file(
    output: Location, sel: SelectionPlan, index: Mapping[tuple[str, ...], int], rel: str
) -> FileSelection:
    """One file's selection from its sidecar (pure given the sidecar and the plan: the
    same file gives the same selection whatever other files exist)."""
    where = output.url(rel + sidecar.SUFFIX)
    wanted = ["id", *(f"{a}_label" for a in sel.axes), sidecar.TOKENS]
    identity = plan.identity(*output.entry(rel + sidecar.SUFFIX))  # before the read: a
    raw = output.read_bytes(rel + sidecar.SUFFIX)  # relabel between shows as a change
    table = sidecar.read_columns(raw, wanted, where, optional=(sidecar.ID_JSON,))
    ids = table["id"].to_pylist()
    typed = sidecar.typed_ids(ids, {c: table[c] for c in table.column_names})
    domain = domain_of_rows(table, sel.axes, index)
    rate = np.where(domain >= 0, sel.rates()[np.maximum(domain, 0)], 0.0)
    k = selection.repeats(rate, selection.uniform(ids, sel.seed, rel))
    tokens = table[sidecar.TOKENS].to_numpy(zero_copy_only=False).astype(np.int64)
    return FileSelection(
        rel=rel,
        identity=identity,
        ids=ids,
        domain=domain,
        tokens=tokens,
        repeats=k,
        json_ids=typed if typed != ids else None,
    )


def files_to_select(run: OpenRun, sel: SelectionPlan, shard: int) -> list[str]:
    """The shard's files of labelled tasks (in its summary), none quarantined."""
    if shard not in sel.shards:
        return []
    rows = plan.files_of_shard(run.plan, shard)
    complete = set(summaries.read(run.run_dir, shard).task_ids)
    left_out = set(run.quarantined)
    pairs = list(zip(rows["file"].to_pylist(), rows["task_id"].to_pylist(), strict=True))
    bad_tasks = {t for f, t in pairs if f in left_out}
    return [f for f, t in pairs if t in complete and t not in bad_tasks]


def rejected(run: OpenRun, rel: str) -> str | None:
    """Why the labels of ``rel`` are not the run's now, or None: no marker vouches for
    them (repaired, or being relabelled), or ``verify`` rejects them as another model's
    or set-up's than run.json pins (``outputs.label_problems``, the check it makes). A
    selection takes no document from such a file."""
    if not run.output.exists(outputs.MARKER.rel(rel)):
        return "no marker vouches for its labels (repaired, or being relabelled)"
    found = outputs.label_problems(run.output, rel, run.meta.labelling, run.meta.models)
    return "; ".join(found) if found else None


def _write(run_dir: Path, sel: SelectionPlan, one: FileSelection, attrs: Location | None) -> None:
    """A file's selection Parquet, and its repeat counts where dolma mix reads them."""
    table = selection.file_table(one.ids, one.repeats)
    target = selection.root(run_dir, sel.name) / selection.FILES_DIR / (one.rel + ".parquet")
    write_atomic(target, selection.file_bytes(table))
    if attrs is not None and dolma.applies(one.rel):
        ids = one.ids if one.json_ids is None else one.json_ids
        attrs.write_bytes(one.rel, selection.attributes_bytes(one.rel, ids, one.repeats, sel.name))


def _unwrite(run_dir: Path, sel: SelectionPlan, rel: str, attrs: Location | None) -> None:
    """Remove what an earlier pass over a file left out now wrote of it (its selection
    Parquet, its repeat counts): a file no document is taken from has neither."""
    (selection.root(run_dir, sel.name) / selection.FILES_DIR / (rel + ".parquet")).unlink(
        missing_ok=True
    )
    if attrs is not None and dolma.applies(rel) and attrs.exists(rel):
        attrs.remove(rel)


def select_shard(
    ctx: OpenRun, name: str, shard: int, *, on_file: Callable[[], None] | None = None
) -> ShardSelection:
    """Select every file of ``shard`` and write its record (the Snakemake job, or one of
    many a caller that opened the run once selects)."""
    sel = selection.load_plan(ctx.run_dir, name)
    if sel is None:
        msg = f"{ctx.run_dir}: no selection named {name!r}: plan it with shardwise select first"
        raise ConfigError(msg)
    index = {d.labels: i for i, d in enumerate(sel.domains)}
    n = len(sel.domains)
    docs, tokens, taken, copies, selected = (np.zeros(n, np.int64) for _ in range(5))
    max_repeats: dict[str, int] = {}
    other = 0
    attrs = attributes_root(ctx, name)
    files, read, left_out = files_to_select(ctx, sel, shard), {}, {}
    for rel in files:
        why = rejected(ctx, rel)
        if why is not None:
            left_out[rel] = why
            _unwrite(ctx.run_dir, sel, rel, attrs)
            continue
        one = select_file(ctx.output, sel, index, rel)
        read[rel] = one.identity
        _write(ctx.run_dir, sel, one, attrs)
        known = one.domain >= 0
        d, t, k = one.domain[known], one.tokens[known], one.repeats[known].astype(np.int64)
        other += int((~known).sum())
        docs += np.bincount(d, minlength=n)
        tokens += np.bincount(d, t, minlength=n).astype(np.int64)
        taken += np.bincount(d, k > 0, minlength=n).astype(np.int64)
        copies += np.bincount(d, k, minlength=n).astype(np.int64)
        selected += np.bincount(d, k * t, minlength=n).astype(np.int64)
        if k.size and int(k.max()) > 0:
            max_repeats[rel] = int(k.max())
        if on_file is not None:
            on_file()
    record = ShardSelection(
        shard=shard,
        plan=sel.digest(),
        files=len(read),
        docs=tuple(docs.tolist()),
        tokens=tuple(tokens.tolist()),
        selected_docs=tuple(taken.tolist()),
        copies=tuple(copies.tolist()),
        selected_tokens=tuple(selected.tolist()),
        max_repeats=max_repeats,
        other_docs=other,
        read=read,
        left_out=left_out,
    )
    selection.save_shard(ctx.run_dir, name, record)
    return record


def select_missing(run: OpenRun, sel: SelectionPlan, *, jobs: int = 4, progress: bool = True):
    """Select here every shard of the plan not selected yet (resumable: a shard's record
    is written after its files); the shards selected now. The run is opened once: its
    plan and quarantine are read once, not once per shard."""
    done = selection.shard_records(run.run_dir, sel)  # read once, not once per shard
    todo = [s for s in sel.shards if s not in done]
    if not todo:
        return []
    per_shard = plan.files_per_shard(run.plan)
    total = sum(per_shard.get(s, 0) for s in todo)
    bar = tqdm(total=total, unit="file", desc=f"select {sel.name}", disable=not progress)

    def one(shard: int) -> None:
        record = select_shard(run, sel.name, shard, on_file=bar.update)
        bar.update(per_shard.get(shard, 0) - record.files)  # files not selected from

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, todo))
    bar.close()
    return todo
