"""Length-sorted batching under a padded-token budget, and the OOM policy (no torch).

A file sorted longest first and cut under a padded-token budget keeps every batch about
the same memory and time; :func:`plan_min_padding` cuts where padding plus a per-batch
cost is least, exactly, in O(n) (a greedy fill left 0.83 of the tokens real).
"""

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

#: Upper bound on rows per batch, whatever the budget: beyond this nothing gets faster and the
#: per-batch host buffers only grow.
DEFAULT_MAX_BATCH_DOCS = 4096


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
    """End index of the batch starting at ``start`` (lengths sorted longest first):
    ``batch_size`` rows, or as many as fit ``rows x sorted_lengths[start] <= budget``; at
    least one row, even one over the budget (documents are never dropped)."""
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


def _batch_ends(sorted_lengths: Sequence[int], budget: int, max_docs: int) -> list[int]:
    """``ends[i]``: the furthest end of a batch starting at ``i`` (``budget //
    sorted_lengths[i]`` rows, 1 to ``max_docs``; strictly increasing in ``i``)."""
    rows = [min(max_docs, max(1, budget // max(1, int(length)))) for length in sorted_lengths]
    return [min(len(rows), i + r) for i, r in enumerate(rows)]


def plan_min_padding(
    sorted_lengths: Sequence[int],
    budget: int,
    batch_cost: int,
    max_docs: int = DEFAULT_MAX_BATCH_DOCS,
) -> list[tuple[int, int]]:
    """Cut longest-first lengths into batches under ``budget`` at the least total cost.

    The cost of a batch ``[i, j)`` is its padded size ``(j - i) * sorted_lengths[i]`` plus
    ``batch_cost`` (tokens' worth of fixed per-batch work: kernel launches, Python, the mask).
    Without that term every document would get a batch of its own (zero padding). Every batch
    respects the budget unless it is a single document longer than the budget (never dropped).

    Exact and O(n): the cost is a Monge array (with lengths sorted longest first,
    ``w(i, j) + w(i', j') <= w(i, j') + w(i', j)`` for ``i <= i' <= j <= j'``, and the budget
    only removes a staircase of entries), so a later batch start, once better for some end,
    stays better for every later end. A deque of candidate starts, each with the first end it
    wins, then answers each end in amortised O(1); the crossing of two candidates is solved in
    closed form because both costs are linear in the end.
    """
    n = len(sorted_lengths)
    if n == 0:
        return []
    if budget < 1 or batch_cost < 0:
        raise ValueError(f"budget must be >= 1 and batch_cost >= 0, got {budget}, {batch_cost}")
    lengths = [int(x) for x in sorted_lengths]
    ends = _batch_ends(lengths, budget, max_docs)
    best = [0] * (n + 1)  # best[j]: least cost of documents [0, j)
    start_of = [0] * (n + 1)  # start of the last batch in that best plan
    # Candidate start i costs best[i] + (j - i) * lengths[i] + batch_cost for an end j <= ends[i].
    intercept = [0] * (n + 1)

    def wins_from(old: int, new: int) -> int:
        """First end at which start ``new`` is at least as cheap as start ``old`` (old < new)."""
        first = new + 1
        if first > ends[old]:
            return first
        slope_old, slope_new = lengths[old], lengths[new]
        if slope_old == slope_new:
            return first if intercept[new] <= intercept[old] else ends[old] + 1
        # intercept[new] + j * slope_new <= intercept[old] + j * slope_old, slope_new < slope_old
        crossing = -((intercept[old] - intercept[new]) // (slope_old - slope_new))
        return min(max(first, crossing), ends[old] + 1)

    candidates: deque[tuple[int, int]] = deque([(0, 1)])  # (start, first end it is best for)
    intercept[0] = 0
    for end in range(1, n + 1):
        while len(candidates) > 1 and candidates[1][1] <= end:
            candidates.popleft()
        start = candidates[0][0]
        best[end] = best[start] + (end - start) * lengths[start] + batch_cost
        start_of[end] = start
        if end == n:
            break
        intercept[end] = best[end] - end * lengths[end]
        while candidates:
            last, last_from = candidates[-1]
            if wins_from(last, end) <= max(last_from, end + 1):
                candidates.pop()  # never cheaper again than the new start
            else:
                break
        if not candidates:
            candidates.append((end, end + 1))
        else:
            first = wins_from(candidates[-1][0], end)
            if first <= n:
                candidates.append((end, first))
    cuts: list[tuple[int, int]] = []
    end = n
    while end > 0:
        cuts.append((start_of[end], end))
        end = start_of[end]
    cuts.reverse()
    return cuts


def plan_packed(
    sorted_lengths: Sequence[int], budget: int, max_docs: int = DEFAULT_MAX_BATCH_DOCS
) -> list[tuple[int, int]]:
    """Packed batches (no padding, nothing to weigh against it): each as many documents as
    fit ``budget`` real tokens, at most ``max_docs``, at least one (never dropped)."""
    cuts: list[tuple[int, int]] = []
    start, n = 0, len(sorted_lengths)
    while start < n:
        end, tokens = start + 1, int(sorted_lengths[start])
        while end < n and end - start < max_docs and tokens + int(sorted_lengths[end]) <= budget:
            tokens += int(sorted_lengths[end])
            end += 1
        cuts.append((start, end))
        start = end
    return cuts


class CannotShrinkError(RuntimeError):
    """A single document does not fit in memory: halving cannot help any more."""


@dataclass(kw_only=True)
class BatchPolicy:
    """How big the next batch may be (a padded-token ``budget``, or ``batch_size`` rows).
    An OOM halves it and the failed batch is cut again and retried; the smaller limit is kept
    for the rest of the job: the memory that was missing will be missing again."""

    budget: int | None = None
    batch_size: int | None = None
    max_docs: int = DEFAULT_MAX_BATCH_DOCS
    oom_retries: int = 0
    #: Per-batch cost in tokens for :func:`plan_min_padding`; ``None`` cuts greedily instead.
    batch_cost: int | None = None
    #: Packed batches: the budget counts real tokens (:func:`plan_packed`).
    packed: bool = False

    def __post_init__(self) -> None:
        if self.budget is None and self.batch_size is None:
            raise ValueError("BatchPolicy needs a budget or a batch_size")

    def plan(self, sorted_lengths: Sequence[int], start: int = 0) -> list[tuple[int, int]]:
        """Every ``(start, end)`` batch from ``start`` on under the current limits: fixed
        rows, packed, least padding plus per-batch cost (``batch_cost``), or a greedy fill."""
        rest = sorted_lengths[start:]
        if self.packed and self.budget is not None and self.batch_size is None:
            cuts = plan_packed(rest, self.budget, self.max_docs)
        elif self.batch_size is not None or self.batch_cost is None:
            cuts = plan_batches(rest, self.budget, self.batch_size, self.max_docs)
        else:
            assert self.budget is not None  # __post_init__: budget or batch_size
            cuts = plan_min_padding(rest, self.budget, self.batch_cost, self.max_docs)
        return [(start + a, start + b) for a, b in cuts]

    def on_oom(self, rows: int, padded: int) -> None:
        """Shrink after a batch of ``rows`` rows and ``padded`` tokens (real ones when
        packed) ran out of memory
        (:class:`CannotShrinkError` for a single document)."""
        if rows <= 1:
            msg = f"out of memory on a single document of {padded} tokens; "
            msg += "lower max_length or use a device with more memory"
            raise CannotShrinkError(msg)
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
