"""Pure batching: longest-first order, padded-token budget, order restore, OOM halving."""

from __future__ import annotations

import itertools
import random

import pytest

from shardwise.batching import (
    BatchPolicy,
    CannotShrinkError,
    cut_batch,
    inverse_permutation,
    padded_tokens,
    plan_batches,
    restore_order,
    sort_longest_first,
)


def test_sort_longest_first_is_stable() -> None:
    lengths = [3, 9, 3, 1, 9, 5]
    order = sort_longest_first(lengths)
    assert order == [1, 4, 5, 0, 2, 3]


def test_batches_respect_budget_and_cover_everything() -> None:
    rng = random.Random(0)
    lengths = [max(2, int(rng.lognormvariate(5, 1))) for _ in range(500)] + [8192] * 3
    sorted_lengths = [lengths[i] for i in sort_longest_first(lengths)]
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


def test_restore_order_roundtrip() -> None:
    values = list("abcdefg")
    order = sort_longest_first([2, 7, 1, 7, 3, 0, 5])
    in_sorted = [values[i] for i in order]
    assert restore_order(order, in_sorted) == values
    inverse = inverse_permutation(order)
    assert [order[inverse[i]] for i in range(len(order))] == list(range(len(order)))


def test_policy_halves_on_oom_and_remembers() -> None:
    policy = BatchPolicy(budget=16384)
    lengths = [1000] * 40
    end = policy.cut(lengths, 0)
    assert end == 16
    policy.on_oom(rows=end, padded=16 * 1000)
    assert policy.budget == 8000 and policy.oom_retries == 1
    assert policy.cut(lengths, 0) == 8  # the same batch, cut again smaller
    assert policy.limit == 8000


def test_policy_batch_size_mode_and_single_document() -> None:
    policy = BatchPolicy(batch_size=32)
    policy.on_oom(rows=32, padded=32 * 64)
    assert policy.batch_size == 16
    with pytest.raises(CannotShrinkError, match="single document"):
        policy.on_oom(rows=1, padded=8192)
    with pytest.raises(ValueError, match="budget or a batch_size"):
        BatchPolicy()
