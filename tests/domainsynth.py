"""A synthetic corpus with a known label distribution (test helper for domains).

Categories have strongly different topic x format distributions; tasks within a
category differ too (each draws its own distribution around the category's), so a
task's documents are a cluster, as in real corpora. Everything is drawn from one
seeded generator, without models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import numpy as np
from synthrun import write_run_json

from shardwise.ops.domains.estimate import Population, Sample
from shardwise.run.labelcounts import LabelCounts
from shardwise.run.sharding import shard_for_task


def weborganizer_labels() -> tuple[list[str], list[str]]:
    """The WebOrganizer topic and format label names (id order)."""
    text = resources.files("shardwise").joinpath("data/weborganizer-labels.json").read_text()
    data = json.loads(text)
    return list(data["topic"]), list(data["format"])


@dataclass(frozen=True, eq=False)
class Corpus:
    """Every task fully labelled: the truth, and what a run would see."""

    categories: list[str]
    topics: list[str]
    formats: list[str]
    task_ids: list[str]
    task_category: np.ndarray  # (T,)
    task_shard: np.ndarray  # (T,)
    task_bytes: np.ndarray  # (T,) input bytes (plan)
    docs: np.ndarray  # (T, topics*formats) documents per cell
    text_bytes: np.ndarray  # (T, topics*formats) text bytes per cell
    total_shards: int

    @property
    def n_cells(self) -> int:
        return self.docs.shape[1]

    def population(self) -> Population:
        return Population(self.categories, self.task_category, self.task_bytes)

    def true_shares(self, weight: str = "docs", classifier: str | None = None) -> np.ndarray:
        """The exact share of each cell (or of each label of one classifier)."""
        values = self._view(self.docs if weight == "docs" else self.text_bytes, classifier)
        return values.sum(axis=0) / values.sum()

    def _view(self, values: np.ndarray, classifier: str | None) -> np.ndarray:
        cube = values.reshape(len(values), len(self.topics), len(self.formats))
        if classifier == "topic":
            return cube.sum(axis=2)
        if classifier == "format":
            return cube.sum(axis=1)
        return values

    def sample(
        self, labelled: np.ndarray, weight: str = "docs", classifier: str | None = None
    ) -> Sample:
        """What the labelled tasks show (sparse rows, as the summaries hold them)."""
        values = self._view(self.docs if weight == "docs" else self.text_bytes, classifier)
        sub = np.where(labelled[:, None], values, 0)
        task, cell = np.nonzero(sub)
        return Sample(
            labelled=labelled,
            task_total=np.where(labelled, values.sum(axis=1), 0).astype(np.float64),
            cell_task=task,
            cell=cell,
            value=sub[task, cell].astype(np.float64),
            n_cells=values.shape[1],
        )

    def labelled_after(self, shards_done: np.ndarray) -> np.ndarray:
        """Tasks labelled when exactly ``shards_done`` are finished."""
        return np.isin(self.task_shard, shards_done)


def make_corpus(
    *,
    seed: int = 12,
    tasks: int = 3000,
    total_shards: int = 500,
    categories: int = 6,
    mean_docs: float = 150.0,
    concentration: float = 40.0,
) -> Corpus:
    """Draw a corpus: category distributions ~ Dirichlet(0.3) over the 576 cells, each
    task's ~ Dirichlet(concentration x category's), documents per task lognormal, text
    bytes per document lognormal with a per-format mean, input bytes ~ 0.35 x text.
    """
    rng = np.random.default_rng(seed)
    topics, formats = weborganizer_labels()
    n_cells = len(topics) * len(formats)
    names = [f"src{c % 3}/cat{c}" for c in range(categories)]
    means = rng.dirichlet(np.full(n_cells, 0.3), size=categories)
    # Uneven category sizes, so weighting matters.
    cat_p = rng.dirichlet(np.full(categories, 2.0))
    task_category = rng.choice(categories, size=tasks, p=cat_p)
    docs_per_task = np.maximum(1, rng.lognormal(np.log(mean_docs), 0.8, size=tasks)).astype(int)
    format_len = rng.lognormal(np.log(2000), 0.5, size=len(formats))
    cell_len = np.tile(format_len, len(topics))
    docs = np.zeros((tasks, n_cells), np.int64)
    text = np.zeros((tasks, n_cells), np.int64)
    for i in range(tasks):
        p = rng.dirichlet(concentration * means[task_category[i]] + 1e-3)
        docs[i] = rng.multinomial(docs_per_task[i], p)
        nz = np.flatnonzero(docs[i])
        # Sum of docs lognormal lengths, approximated per cell (mean x count x noise).
        text[i, nz] = np.maximum(
            1, (cell_len[nz] * docs[i, nz] * rng.lognormal(0, 0.3, nz.size)).astype(np.int64)
        )
    task_bytes = text.sum(axis=1) * rng.uniform(0.25, 0.45, size=tasks)
    task_ids = [f"{names[c]}/part-{i:05d}.jsonl.zst" for i, c in enumerate(task_category)]
    task_shard = np.array([shard_for_task(t, total_shards, 0) for t in task_ids], np.int64)
    return Corpus(
        categories=names,
        topics=topics,
        formats=formats,
        task_ids=task_ids,
        task_category=task_category.astype(np.int64),
        task_shard=task_shard,
        task_bytes=task_bytes.astype(np.float64),
        docs=docs,
        text_bytes=text,
        total_shards=total_shards,
    )


def task_counts(corpus: Corpus, i: int) -> dict:
    """Task ``i``'s ``label_counts`` (topic, format and their pair), as a job writes it."""
    nt, nf = len(corpus.topics), len(corpus.formats)
    docs = corpus.docs[i].reshape(nt, nf)
    text = corpus.text_bytes[i].reshape(nt, nf)
    pair: dict[str, dict[str, list[int]]] = {}
    for a, b in zip(*np.nonzero(docs), strict=True):
        pair.setdefault(corpus.topics[a], {})[corpus.formats[b]] = [
            int(docs[a, b]),
            int(text[a, b]),
        ]

    def single(axis: int, names: list[str]) -> dict[str, list[int]]:
        d, t = docs.sum(axis=axis), text.sum(axis=axis)
        return {names[j]: [int(d[j]), int(t[j])] for j in np.flatnonzero(d)}

    return {
        "format_version": 1,
        "docs": int(docs.sum()),
        "text_bytes": int(text.sum()),
        "classifiers": {"topic": single(1, corpus.topics), "format": single(0, corpus.formats)},
        "pairs": {"topic,format": pair},
    }


def write_run(
    root,
    corpus: Corpus,
    done_shards,
    *,
    remote_shards=(),
    quarantine=(),
):
    """A run directory for ``corpus``: run.json, plan, shard markers, summaries.

    ``done_shards`` finished with a job (marker + summary); ``remote_shards`` are marked
    done by another cluster (marker, ``source: remote``, no summary). Returns the dir.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardwise.run import markers, summaries
    from shardwise.store.atomic import write_atomic

    run_dir = root / "run"
    write_run_json(run_dir, corpus.total_shards, output_uri=str(root / "labels"))
    order = np.argsort(corpus.task_ids)
    pq.write_table(
        pa.table({
            "file": [corpus.task_ids[i] for i in order],
            "size": pa.array(corpus.task_bytes[order].astype(np.int64), pa.int64()),
            "task_id": [corpus.task_ids[i] for i in order],
            "shard": pa.array(corpus.task_shard[order], pa.int64()),
            "category": [corpus.categories[corpus.task_category[i]] for i in order],
        }),
        run_dir / "plan.parquet",
    )  # fmt: skip
    members: dict[int, list[int]] = {}
    for i, s in enumerate(corpus.task_shard.tolist()):
        members.setdefault(s, []).append(i)
    common = {"total_shards": corpus.total_shards, "minimum_shard_index": 0, "docs": None}
    for shard in sorted({int(s) for s in done_shards}):
        tasks = members.get(shard, [])
        counts = {
            corpus.task_ids[i]: LabelCounts.from_json(task_counts(corpus, i), "synthetic")
            for i in tasks
        }
        data = summaries.build(shard, [(corpus.task_ids[i], [corpus.task_ids[i]]) for i in tasks],
                               counts)  # fmt: skip
        write_atomic(summaries.summary_path(run_dir, shard), data)
        marker = markers.ShardMarker(shard=shard, tasks=len(tasks), files=len(tasks), **common)
        markers.write_shard_marker(run_dir, marker)
    for shard in sorted({int(s) for s in remote_shards}):
        n = len(members.get(shard, []))
        marker = markers.ShardMarker(shard=shard, tasks=n, files=n, source="remote", **common)
        markers.write_shard_marker(run_dir, marker)
    if quarantine:
        entries = {rel: {"reason": "test", "at": "2026-01-01T00:00:00Z", "by": "test"}
                   for rel in quarantine}  # fmt: skip
        (run_dir / "quarantine.json").write_text(
            json.dumps({"format_version": 1, "files": entries})
        )
    return run_dir
