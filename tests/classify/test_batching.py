"""Pure batching: longest-first order, padded-token budget, order restore, OOM halving."""

from __future__ import annotations

import itertools
import random

import pytest

from shardwise.classify.batching import (
    BatchPolicy,
    CannotShrinkError,
    cut_batch,
    padded_tokens,
    plan_batches,
    plan_min_padding,
    plan_packed,
)


def test_batches_respect_budget_and_cover_everything() -> None:
    rng = random.Random(0)
    lengths = [max(2, int(rng.lognormvariate(5, 1))) for _ in range(500)] + [8192] * 3
    sorted_lengths = sorted(lengths, reverse=True)
    batches = plan_batches(sorted_lengths, budget=16384)
    assert batches[0][0] == 0 and batches[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(batches))
    for start, end in batches:
        assert end > start
        assert padded_tokens(sorted_lengths, start, end) <= 16384
        # greedy: one more row would not have fitted (unless the file ended or cap hit)
        if end < len(sorted_lengths):
            assert (end - start + 1) * sorted_lengths[start] > 16384


def test_oversize_document_gets_its_own_batch() -> None:
    assert cut_batch([9000, 10, 10], 0, budget=4096) == 1
    assert cut_batch([9000, 10, 10], 1, budget=4096) == 3


def test_fixed_batch_size_and_cap() -> None:
    assert plan_batches([5] * 10, budget=None, batch_size=4) == [(0, 4), (4, 8), (8, 10)]
    assert cut_batch([1] * 100, 0, budget=10**6, max_docs=7) == 7
    with pytest.raises(ValueError, match="budget"):
        cut_batch([1], 0, budget=None)


def test_policy_halves_on_oom_and_remembers() -> None:
    policy = BatchPolicy(budget=16384)
    lengths = [1000] * 40
    (_, end), *_ = policy.plan(lengths, 0)
    assert end == 16
    policy.on_oom(rows=end, padded=16 * 1000)
    assert policy.budget == 8000 and policy.oom_retries == 1
    assert policy.plan(lengths, 0)[0] == (0, 8)  # the same batch, cut again smaller
    assert policy.limit == 8000


def test_policy_batch_size_mode_and_single_document() -> None:
    policy = BatchPolicy(batch_size=32)
    policy.on_oom(rows=32, padded=32 * 64)
    assert policy.batch_size == 16
    with pytest.raises(CannotShrinkError, match="single document"):
        policy.on_oom(rows=1, padded=8192)
    with pytest.raises(ValueError, match="budget or a batch_size"):
        BatchPolicy()


def _least_cost(lengths: list[int], budget: int, cost: int, max_docs: int) -> int:
    """Brute-force O(n^2) dynamic programme: the least total padded tokens + per-batch cost."""
    best = [0] + [None] * len(lengths)
    for end in range(1, len(lengths) + 1):
        options = [
            best[start] + (end - start) * lengths[start] + cost
            for start in range(max(0, end - max_docs), end)
            if end - start == 1 or (end - start) * lengths[start] <= budget
        ]
        best[end] = min(options)
    return best[-1]


def _plan_cost(lengths: list[int], cuts: list[tuple[int, int]], cost: int) -> int:
    return sum(padded_tokens(lengths, a, b) + cost for a, b in cuts)


def test_min_padding_plan_is_optimal_on_random_cases() -> None:
    rng = random.Random(1)
    for _ in range(400):
        n = rng.randint(1, 30)
        scale = rng.choice((3, 50, 300))
        lengths = sorted((rng.randint(1, scale) for _ in range(n)), reverse=True)
        budget, cost, max_docs = rng.randint(1, 1500), rng.randint(0, 400), rng.randint(1, 12)
        cuts = plan_min_padding(lengths, budget, cost, max_docs)
        assert cuts[0][0] == 0 and cuts[-1][1] == n
        assert all(a[1] == b[0] for a, b in itertools.pairwise(cuts))
        for start, end in cuts:
            assert end - start <= max_docs
            assert end - start == 1 or padded_tokens(lengths, start, end) <= budget
        assert _plan_cost(lengths, cuts, cost) == _least_cost(lengths, budget, cost, max_docs)


def test_min_padding_beats_greedy_and_keeps_the_budget() -> None:
    rng = random.Random(0)
    lengths = [min(2048, max(3, int(rng.lognormvariate(5.5, 1)))) for _ in range(600)]
    sorted_lengths = sorted(lengths, reverse=True)
    real = sum(lengths)
    greedy = plan_batches(sorted_lengths, budget=16384)
    planned = plan_min_padding(sorted_lengths, 16384, batch_cost=128)
    greedy_padded = sum(padded_tokens(sorted_lengths, a, b) for a, b in greedy)
    planned_padded = sum(padded_tokens(sorted_lengths, a, b) for a, b in planned)
    assert real / greedy_padded < 0.93 < 0.95 < real / planned_padded
    assert all(padded_tokens(sorted_lengths, a, b) <= 16384 for a, b in planned)
    # without a per-batch cost every batch holds documents of one length only: no padding
    free = plan_min_padding(sorted_lengths, 16384, batch_cost=0)
    assert sum(padded_tokens(sorted_lengths, a, b) for a, b in free) == real


def test_min_padding_edge_cases() -> None:
    assert plan_min_padding([], 100, 10) == []
    assert plan_min_padding([9000, 10, 10], 4096, 5) == [(0, 1), (1, 3)]  # oversize alone
    assert plan_min_padding([7] * 5, 100, 10**6) == [(0, 5)]  # one batch when it fits
    with pytest.raises(ValueError, match="budget"):
        plan_min_padding([5], 0, 1)


def test_policy_plans_with_a_batch_cost_and_replans_after_oom() -> None:
    lengths = [900, 880, 860, 100, 90, 80, 70, 60]
    policy = BatchPolicy(budget=4000, batch_cost=100)
    assert policy.plan(lengths) == [(0, 3), (3, 8)]
    policy.on_oom(rows=3, padded=2700)
    assert policy.budget == 1350
    assert policy.plan(lengths, 0) == [(0, 1), (1, 2), (2, 3), (3, 8)]
    assert policy.plan(lengths, 3) == [(3, 8)]
    fixed = BatchPolicy(budget=4000)  # no batch cost: greedy fill, as before
    assert fixed.plan(lengths) == [(0, 4), (4, 8)]


def test_packed_plans_count_real_tokens() -> None:
    lengths = [900, 500, 300, 300, 100, 10, 10, 1]
    cuts = plan_packed(lengths, 1000)
    assert cuts == [(0, 1), (1, 3), (3, 8)]
    assert all(sum(lengths[a:b]) <= 1000 for a, b in cuts)
    assert plan_packed([5000, 3], 1000) == [(0, 1), (1, 2)]  # one over the budget: alone
    assert plan_packed([1] * 10, 1000, max_docs=4) == [(0, 4), (4, 8), (8, 10)]
    assert plan_packed([], 10) == []
    policy = BatchPolicy(budget=1000, batch_cost=64, packed=True)
    assert policy.plan(lengths, 1) == [(1, 3), (3, 8)]
    policy.on_oom(3, 1100)  # real tokens when packed
    assert policy.budget == 500 and policy.plan(lengths, 1)[0] == (1, 2)
