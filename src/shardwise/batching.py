"""Length-sorted batching under a padded-token budget, order restore, and the OOM policy.

Why: web documents have heavy-tailed lengths. Batches of a fixed count in input order pad every
document to the longest one in its batch (often the truncation length), so most of the compute
is spent on padding. Sorting a whole file longest-first puts similar lengths together, and a
padded-token budget (rows x longest row) keeps each batch about the same memory and time: many
short documents per batch, few long ones. Results are scattered back to input order.

Pure functions and a tiny stateful policy; no torch, so they are unit-testable on their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "DEFAULT_MAX_BATCH_DOCS",
    "BatchPolicy",
    "CannotShrinkError",
    "cut_batch",
    "inverse_permutation",
    "padded_tokens",
    "plan_batches",
    "restore_order",
    "sort_longest_first",
]

#: Upper bound on rows per batch, whatever the budget: beyond this nothing gets faster and the
#: per-batch host buffers only grow.
DEFAULT_MAX_BATCH_DOCS = 4096

T = TypeVar("T")


def sort_longest_first(lengths: Sequence[int]) -> list[int]:
    """Indices of ``lengths`` ordered longest first; ties keep input order (stable)."""
    return sorted(range(len(lengths)), key=lambda i: -lengths[i])


def inverse_permutation(order: Sequence[int]) -> list[int]:
    """``inv`` such that ``inv[order[k]] == k``."""
    inverse = [0] * len(order)
    for position, index in enumerate(order):
        inverse[index] = position
    return inverse


def restore_order(order: Sequence[int], values_in_order: Sequence[T]) -> list[T]:
    """Map values computed in ``order`` (sorted positions) back to input positions."""
    if len(order) != len(values_in_order):
        raise ValueError(f"{len(order)} positions but {len(values_in_order)} values")
    out: list[T | None] = [None] * len(order)
    for value, index in zip(values_in_order, order, strict=True):
        out[index] = value
    return out  # type: ignore[return-value]


def padded_tokens(sorted_lengths: Sequence[int], start: int, end: int) -> int:
    """Padded size of ``sorted_lengths[start:end]`` (longest first): rows x first row's length."""
    if end <= start:
        return 0
    return (end - start) * int(sorted_lengths[start])


def cut_batch(
    sorted_lengths: Sequence[int],
    start: int,
    budget: int | None,
    batch_size: int | None = None,
    max_docs: int = DEFAULT_MAX_BATCH_DOCS,
) -> int:
    """End index of the batch starting at ``start`` (lengths sorted longest first).

    With ``batch_size`` the batch has that many rows. Otherwise it takes as many rows as fit
    ``rows x sorted_lengths[start] <= budget`` (the first row is the longest, so that is the
    padded size). A batch always has at least one row, even if that row alone exceeds the
    budget: documents are never dropped.
    """
    n = len(sorted_lengths)
    if start >= n:
        return n
    if batch_size is not None:
        rows = max(1, batch_size)
    else:
        if budget is None:
            raise ValueError("either budget or batch_size is required")
        rows = max(1, budget // max(1, int(sorted_lengths[start])))
    rows = min(rows, max(1, max_docs))
    return min(n, start + rows)


def plan_batches(
    sorted_lengths: Sequence[int],
    budget: int | None,
    batch_size: int | None = None,
    max_docs: int = DEFAULT_MAX_BATCH_DOCS,
) -> list[tuple[int, int]]:
    """All ``(start, end)`` batches for a fixed budget (the engine cuts lazily instead)."""
    out: list[tuple[int, int]] = []
    start = 0
    while start < len(sorted_lengths):
        end = cut_batch(sorted_lengths, start, budget, batch_size, max_docs)
        out.append((start, end))
        start = end
    return out


class CannotShrinkError(RuntimeError):
    """A single document does not fit in memory: halving cannot help any more."""


@dataclass
class BatchPolicy:
    """How big the next batch may be; halves on out-of-memory and remembers what worked.

    ``budget`` is the padded-token budget (used unless ``batch_size`` is set, in which case the
    row count is halved instead). After an OOM the failed batch is cut again from the same start
    under the halved limit and retried, so nothing is skipped; the smaller limit is kept for the
    rest of the job, because the memory that was missing will be missing again.
    """

    budget: int | None = None
    batch_size: int | None = None
    max_docs: int = DEFAULT_MAX_BATCH_DOCS
    oom_retries: int = 0

    def __post_init__(self) -> None:
        if self.budget is None and self.batch_size is None:
            raise ValueError("BatchPolicy needs a budget or a batch_size")

    def cut(self, sorted_lengths: Sequence[int], start: int) -> int:
        """End of the next batch from ``start`` under the current limits."""
        return cut_batch(sorted_lengths, start, self.budget, self.batch_size, self.max_docs)

    def on_oom(self, rows: int, padded: int) -> None:
        """Shrink after a batch of ``rows`` rows and ``padded`` padded tokens ran out of memory.

        Raises :class:`CannotShrinkError` when the batch was a single document.
        """
        if rows <= 1:
            raise CannotShrinkError(
                f"out of memory on a single document of {padded} tokens; "
                "lower max_length or use a device with more memory"
            )
        self.oom_retries += 1
        if self.batch_size is not None:
            self.batch_size = max(1, min(self.batch_size, rows) // 2)
        else:
            assert self.budget is not None
            self.budget = max(1, min(self.budget, padded) // 2)

    @property
    def limit(self) -> int:
        """The number reported as ``batch_budget``: tokens, or rows in fixed-size mode."""
        return int(self.batch_size if self.batch_size is not None else self.budget or 0)
