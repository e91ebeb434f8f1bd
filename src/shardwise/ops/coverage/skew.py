"""The skew flag: a category whose completion lies outside the binomial 99% interval of
the run's completion fails *systematically*, not by chance (docs/coverage.md)."""

import numpy as np

#: Two-sided 99% normal quantile used by the skew flag.
SKEW_Z = 2.576
#: Categories with fewer tasks are never flagged: too noisy to say anything.
SKEW_MIN_TASKS = 50


def skew_flags(
    done: np.ndarray, total: np.ndarray, overall: float, effective_n: np.ndarray | None = None
) -> np.ndarray:
    """Which categories deviate from ``overall`` by more than a binomial 99% interval: with
    failures spread at random a category's completion lies within ``z * sqrt(p(1-p)/n)`` of
    ``p``; outside it, it fails *systematically*. Under 50 tasks: never flagged.
    ``effective_n`` (:func:`effective_tasks`) keeps that promise mid-run, when a category's
    tasks in one shard are done together."""
    total = np.asarray(total, dtype=np.float64)
    n = total if effective_n is None else np.asarray(effective_n, dtype=np.float64)
    frac = np.divide(done, total, out=np.zeros_like(total), where=total > 0)
    half_width = SKEW_Z * np.sqrt(overall * (1.0 - overall) / np.maximum(n, 1.0))
    return (total >= SKEW_MIN_TASKS) & (np.abs(frac - overall) > half_width)


def effective_tasks(
    task_category: np.ndarray, task_shard: np.ndarray, n_categories: int
) -> np.ndarray:
    """Kish effective sample size per category when shards are the unit of completion:
    ``n_eff = n^2 / sum_s n_s^2`` over the shards ``s`` holding ``n_s`` of its tasks (``n``
    when no shard holds two: exactly the binomial rule; smaller for a large category)."""
    if task_category.size == 0:
        return np.zeros(n_categories)
    shard_span = int(task_shard.max()) + 1
    keys = task_category.astype(np.int64) * shard_span + task_shard
    unique_keys, per_shard = np.unique(keys, return_counts=True)
    weights = per_shard.astype(np.float64) ** 2
    squares = np.bincount(unique_keys // shard_span, weights=weights, minlength=n_categories)
    counts = np.bincount(task_category, minlength=n_categories).astype(np.float64)
    return np.divide(counts**2, squares, out=np.zeros(n_categories), where=squares > 0)
