"""``shardwise select``, pass 1: from target domain weights (WebOrganizer's shape) and a
token budget to a rate per domain, from the shard summaries alone: ``min(budget x weight
/ tokens, max_repeat)``, a capped domain's shortfall reported (or redistributed)."""

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.ops.common.text import human_count, near_labels
from shardwise.ops.domains import compute as dom
from shardwise.planner.extend import change_words
from shardwise.run import freshness, selection, summaries
from shardwise.run.opened import OpenRun, open_run
from shardwise.run.runjson import RunMeta
from shardwise.run.selection import Domain, SelectionPlan

#: How far the weights may sum from 1 (rounding in a hand-written or exported file).
WEIGHT_SUM_TOLERANCE = 0.01
_SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
_BUDGET = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([KMBGT]?)\s*$", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Request:
    """What the user asked for."""

    name: str
    weights: tuple[tuple[tuple[Any, ...], float], ...]  # (domain as given, weight)
    weights_from: str
    budget_tokens: int
    max_repeat: int = 1
    seed: int = 0
    redistribute: bool = False
    partial: bool = False
    pair: str | None = None
    classifier: str | None = None

    def same_as(self, plan: SelectionPlan) -> bool:
        """Whether an existing plan answers this request (its weights aside)."""
        return (
            plan.budget_tokens,
            plan.max_repeat,
            plan.seed,
            plan.redistribute,
            plan.partial,
        ) == (self.budget_tokens, self.max_repeat, self.seed, self.redistribute, self.partial)


def parse_budget(text: str) -> int:
    """``100B``, ``2.5M``, ``20000``: a token count (K, M, B or G, T)."""
    m = _BUDGET.match(text)
    if not m:
        raise ConfigError(f"--tokens {text!r}: give a token count, e.g. 100B, 2.5M or 20000")
    value = float(m.group(1)) * _SUFFIXES[m.group(2).upper()]
    if value < 1:
        raise ConfigError(f"--tokens {text!r}: the budget must be at least 1 token")
    return round(value)


def check_name(name: str) -> str:
    """A selection's name (a directory and a Dolma attribute set name)."""
    if not selection.NAME.match(name):
        msg = f"--name {name!r}: use letters, digits, '_', '-' and '.' (up to 64, starting "
        msg += "with a letter or digit): it names a directory and a Dolma attribute set"
        raise ConfigError(msg)
    return name


def read_weights(path: Path) -> tuple[tuple[tuple[Any, ...], float], ...]:
    """The (domain, weight) entries of a weights file, each checked; the domain as a
    tuple (one element per axis), ids or names as written."""
    try:
        data = json.loads(Path(path).read_text("utf-8"))
    except FileNotFoundError as e:
        raise ConfigError(f"--weights {path}: no such file") from e
    except (OSError, ValueError) as e:
        raise ConfigError(f"--weights {path}: not readable JSON: {e}") from e
    if not isinstance(data, list) or not data:
        msg = f'--weights {path}: give a JSON list of {{"domain": ..., "weight": ...}} entries '
        raise ConfigError(msg + "(what `shardwise domains --format weborganizer` writes)")
    out = [_weight_entry(entry, f"--weights {path}: entry {i}") for i, entry in enumerate(data)]
    total = sum(w for _, w in out)
    if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
        msg = f"--weights {path}: the weights sum to {total:.4g}, not 1 (within "
        msg += f"{WEIGHT_SUM_TOLERANCE}): they are shares of the budget; divide each by {total:.4g}"
        raise ConfigError(msg)
    if len({d for d, _ in out}) != len(out):
        raise ConfigError(f"--weights {path}: a domain is listed twice")
    return tuple(out)


def _weight_entry(entry: Any, where: str) -> tuple[tuple[Any, ...], float]:
    """One checked entry of a weights file: its domain as a tuple, its weight."""
    if not isinstance(entry, dict) or "domain" not in entry or "weight" not in entry:
        raise ConfigError(f"{where} needs a domain and a weight, got {entry!r}")
    d, w = entry["domain"], entry["weight"]
    parts = tuple(d) if isinstance(d, list) else (d,)
    ok_parts = all(isinstance(p, (int, str)) and not isinstance(p, bool) for p in parts)
    if not parts or len(parts) > 2 or not ok_parts:
        raise ConfigError(f"{where}: domain {d!r} is not an id, a name, or a pair of them")
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not w >= 0:
        raise ConfigError(f"{where}: weight {w!r} is not a number >= 0")
    return parts, float(w)


@dataclass(frozen=True, kw_only=True)
class Available:
    """Labelled tokens and documents per domain of one view, from the summaries."""

    axes: tuple[str, ...]
    labels: tuple[tuple[str, ...], ...]  # the domains seen, sorted
    tokens: np.ndarray  # int64 per domain
    docs: np.ndarray
    labelled_tasks: int
    population_tasks: int
    shards: tuple[int, ...]  # summarized shards holding the view


def available(data: dom.DomainData, view: str) -> Available:
    """Sum each domain's tokens and documents over the labelled tasks in the plan."""
    axes = tuple(view.split(","))
    totals: dict[tuple[str, ...], np.ndarray] = {}
    labelled = np.zeros(len(data.task_ids), bool)
    shards = []
    for s, tmap in zip(data.summaries, data.task_index, strict=True):
        if view not in s.views:
            continue
        shards.append(s.shard)
        ok = (tmap >= 0) & data.in_population[np.maximum(tmap, 0)]
        labelled[tmap[ok]] = True
        cells = s.view_cells(view)
        keep = ok[cells.column("task").to_numpy()]
        cols = [cells.column(c).to_numpy()[keep].astype(np.int64) for c in ("a", "b")[: len(axes)]]
        key = cols[0] * 32768 + (cols[1] if len(cols) > 1 else 0)
        uniq, inverse = np.unique(key, return_inverse=True)
        sums = [
            np.bincount(inverse, cells.column(c).to_numpy()[keep], len(uniq))
            for c in ("tokens", "docs")
        ]
        for j, k in enumerate(uniq.tolist()):
            idx = (k // 32768, k % 32768)[: len(axes)]
            names = tuple(s.labels[axes[a]][i] for a, i in enumerate(idx))
            totals[names] = totals.get(names, np.zeros(2)) + np.array([sums[0][j], sums[1][j]])
    order = sorted(totals)
    tokens = np.array([round(totals[k][0]) for k in order], np.int64)
    docs = np.array([round(totals[k][1]) for k in order], np.int64)
    population = int(data.in_population.sum())
    return Available(
        axes=axes,
        labels=tuple(order),
        tokens=tokens,
        docs=docs,
        labelled_tasks=int(labelled.sum()),
        population_tasks=population,
        shards=tuple(sorted(shards)),
    )


def _axis_ids(name: str, seen: Sequence[str]) -> dict[int, str]:
    """WebOrganizer id -> label name for one axis whose labels are WebOrganizer's."""
    for ids in dom.weborganizer_ids().values():
        if set(seen) <= set(ids):
            return {i: n for n, i in ids.items()}
    return {}


def _resolve_part(part: Any, axis: str, seen: Sequence[str], ids: Mapping[int, str]) -> str:
    """One axis of a domain as a label name: an id mapped, a name checked."""
    if isinstance(part, int):
        if part in ids:
            return ids[part]
        known = f"0..{max(ids)}" if ids else "none: its labels are not WebOrganizer's; use names"
        raise ConfigError(f"--weights: {axis} id {part} is not a label id (ids: {known})")
    if part in seen:
        return part
    msg = f"--weights: {axis} {part!r} is no label of this run's documents{near_labels(part, seen)}"
    raise ConfigError(msg)


def resolve_weights(
    request: Request, avail: Available, label_sets: Mapping[str, Sequence[str]]
) -> dict[tuple[str, ...], float]:
    """The request's weights by domain labels (ids mapped, names checked)."""
    out: dict[tuple[str, ...], float] = {}
    for parts, w in request.weights:
        if len(parts) != len(avail.axes):
            give = "[topic, format] pairs" if len(avail.axes) > 1 else "single labels"
            msg = f"--weights: domain {list(parts)} has {len(parts)} part(s), but the selection "
            msg += f"is over {' x '.join(avail.axes)}: give {give} or choose the view with --pair "
            raise ConfigError(msg + "/ --classifier")
        labels = []
        for axis, part in zip(avail.axes, parts, strict=True):
            seen = label_sets.get(axis, ())
            labels.append(_resolve_part(part, axis, seen, _axis_ids(axis, seen)))
        out[tuple(labels)] = out.get(tuple(labels), 0.0) + w
    return out


def rates(
    weights: Sequence[float], tokens: Sequence[int], budget: int, cap: int, redistribute: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Each domain's target tokens and rate (expected copies per document, <= ``cap``);
    ``redistribute`` moves what capped domains cannot give to the others by weight, until
    nothing is left or every weighted domain is capped."""
    w = np.asarray(weights, np.float64)
    a = np.asarray(tokens, np.float64)
    target = budget * w / max(w.sum(), 1e-300)
    for _ in range(len(w) + 1):
        most = cap * a
        short = np.maximum(target - most, 0.0)
        free = (w > 0) & (target < most)
        if not redistribute or short.sum() <= 1e-9 * budget or not free.any():
            break
        target = np.minimum(target, most)
        target[free] += short.sum() * w[free] / w[free].sum()
    rate = np.divide(np.minimum(target, cap * a), a, out=np.zeros_like(a), where=a > 0)
    return target, np.minimum(rate, float(cap))


def _check_budget(request: Request, weights: np.ndarray, tokens: np.ndarray) -> None:
    """Refuse a budget that the weighted domains cannot give even at the cap."""
    most = int(request.max_repeat * tokens[weights > 0].sum())
    if request.budget_tokens > most:
        msg = f"--tokens {human_count(request.budget_tokens)}: the domains the weights ask for "
        msg += f"hold {human_count(most / request.max_repeat)} labelled tokens, "
        msg += f"{human_count(most)} at --max-repeat {request.max_repeat}: lower --tokens to at "
        msg += f"most {most:,}, or raise --max-repeat"
        raise ConfigError(msg)


def _require_complete(request: Request, avail: Available) -> None:
    """A run not yet labelled whole is refused unless asked to select from what is."""
    if avail.labelled_tasks < avail.population_tasks and not request.partial:
        pct = 100.0 * avail.labelled_tasks / max(avail.population_tasks, 1)
        msg = f"the run is labelled for {avail.labelled_tasks:,} of {avail.population_tasks:,} "
        msg += f"task(s) ({pct:.1f}%): a selection now leaves the rest out. Finish the run "
        msg += "(snakemake), or pass --partial to select from what is labelled (every line of "
        raise ConfigError(msg + "the report then says so)")


def plan(run_dir: Path, request: Request) -> SelectionPlan:
    """Pass 1: the selection's plan, from the run's summaries."""
    run = open_run(run_dir, settings_required=False)
    meta, data = run.meta, dom.load(run)
    dom.require_labels(data)
    dom.require_tokens(data, "shardwise select", others=False)
    view = dom.choose_view(data, request.pair, request.classifier)
    avail = available(data, view)
    _require_complete(request, avail)
    sets = {k: sorted(v) for k, v in summaries.label_sets(data.summaries).items()}
    wanted = resolve_weights(request, avail, sets)
    keys = sorted(set(avail.labels) | set(wanted))
    index = {k: i for i, k in enumerate(avail.labels)}
    tokens = np.array([avail.tokens[index[k]] if k in index else 0 for k in keys], np.int64)
    docs = np.array([avail.docs[index[k]] if k in index else 0 for k in keys], np.int64)
    weights = np.array([wanted.get(k, 0.0) for k in keys])
    _check_budget(request, weights, tokens)
    target, rate = rates(
        weights, tokens, request.budget_tokens, request.max_repeat, request.redistribute
    )
    domains = tuple(
        Domain(
            labels=k,
            weight=float(weights[i]),
            available_tokens=int(tokens[i]),
            available_docs=int(docs[i]),
            target_tokens=float(target[i]),
            rate=float(rate[i]),
            capped=bool(weights[i] > 0 and rate[i] * tokens[i] < target[i] * (1 - 1e-9)),
        )
        for i, k in enumerate(keys)
    )
    return SelectionPlan(
        name=request.name,
        axes=avail.axes,
        budget_tokens=request.budget_tokens,
        max_repeat=request.max_repeat,
        seed=request.seed,
        redistribute=request.redistribute,
        partial=avail.labelled_tasks < avail.population_tasks,
        labelled_tasks=avail.labelled_tasks,
        population_tasks=avail.population_tasks,
        shards=avail.shards,
        domains=domains,
        weights_from=request.weights_from,
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        run_fingerprint=meta.fingerprint,
        run_changes=len(meta.input_changes),
    )


def changed_since(meta: RunMeta, sel: SelectionPlan) -> str | None:
    """How the run's input (``meta``: its run.json) changed since ``sel`` was made (None:
    it did not, or the plan predates the record)."""
    if not sel.run_fingerprint:
        return None
    if meta.fingerprint == sel.run_fingerprint:
        return None
    since = meta.input_changes[sel.run_changes :]
    added, removed = sum(c.tasks_added for c in since), sum(c.tasks_removed for c in since)
    text = f"{len(since):,} input change(s) by `shardwise plan --extend` since: "
    return text + change_words(added, removed, "task")


def consequence(meta: RunMeta, sel: SelectionPlan) -> str:
    """What the run's change since ``sel`` was made means for it: tasks added are in no
    shard of it; tasks removed were selected from documents the run no longer has."""
    since = meta.input_changes[sel.run_changes :]
    out = []
    if sum(c.tasks_added for c in since):
        out.append("the files added since are in no shard of it")
    if sum(c.tasks_removed for c in since):
        out.append("files it selected have left the run")
    return " and ".join(out) or "its shards were selected from another input"


def reselect(run_dir: Path, sel: SelectionPlan) -> str:
    """The ``shardwise select`` command that makes ``sel`` again over the run as it is,
    under the first free name ``<name>-2``, ``-3``, ..."""
    taken = set(selection.names(run_dir))
    names = (f"{sel.name}-{k}" for k in range(2, len(taken) + 3))
    name = next(n for n in names if n not in taken)
    words = [
        f"shardwise select --run-dir {run_dir} --name {name} --weights {sel.weights_from}",
        f"--tokens {sel.budget_tokens}",
    ]
    view = "--pair " + ",".join(sel.axes) if len(sel.axes) == 2 else f"--classifier {sel.axes[0]}"
    words += [view] if sel.axes else []
    words += [f"--max-repeat {sel.max_repeat}"] if sel.max_repeat != 1 else []
    words += [f"--seed {sel.seed}"] if sel.seed else []
    words += ["--redistribute"] if sel.redistribute else []
    words += ["--partial"] if sel.partial else []
    return " ".join(words)


def stale_note(ctx: OpenRun, sel: SelectionPlan, fresh: freshness.Freshness) -> str | None:
    """Why ``sel`` no longer describes the run's labels, and the command that selects
    anew (None: it still does): the run's input changed since it was made, or a file it
    read was relabelled, repaired, quarantined or removed since (``fresh``)."""
    changed = changed_since(ctx.meta, sel)
    why = []
    if changed is not None:
        why.append(f"made before the run changed ({changed}): {consequence(ctx.meta, sel)}")
    if fresh.stale:
        why.append(f"{fresh.text()}: the documents it took from them are not what it counted")
    if not why:
        return None
    return "; ".join(why) + f"; select anew: `{reselect(ctx.run_dir, sel)}`"


def planned(run_dir: Path, request: Request | None, name: str) -> SelectionPlan:
    """The plan of selection ``name``: made and saved now (``request``), or the one saved;
    a name is planned once (another request's files would mix with its)."""
    existing = selection.load_plan(run_dir, name)
    if request is None:
        if existing is None:
            msg = f"{run_dir}: no selection named {name!r} (none of {selection.names(run_dir)}); "
            msg += "give --weights and --tokens to plan one"
            raise ConfigError(msg)
        return existing
    if existing is not None:
        ctx = open_run(run_dir, settings_required=False)
        fresh = freshness.check(ctx, selection.shard_records(run_dir, existing).values())
        stale = stale_note(ctx, existing, fresh)
        if stale is not None:
            where = selection.root(run_dir, existing.name)
            msg = f"selection {name!r} of {run_dir} no longer describes the run's labels: "
            raise ConfigError(msg + f"{stale}; or remove {where} to plan {name!r} anew")
    new = plan(run_dir, request)
    if existing is None:  # a name is planned once: another select may create it first
        existing = selection.save_plan(run_dir, new)
        if existing is new:
            return new
    weights = [(d.labels, d.weight) for d in existing.domains]
    if not request.same_as(existing) or weights != [(d.labels, d.weight) for d in new.domains]:
        msg = f"selection {name!r} of {run_dir} was planned with other settings "
        msg += f"({selection.root(run_dir, name) / selection.PLAN_JSON}): give another --name, "
        msg += "or remove that directory to plan it anew"
        raise ConfigError(msg)
    return existing
