"""The counts people read: ``--tokens 1T`` is echoed as what was typed, in billions."""

import pytest

from shardwise.ops.common.text import human_count
from shardwise.ops.select.plan import parse_budget


@pytest.mark.parametrize(
    ("typed", "said"),
    [("20000", "20,000"), ("2.5M", "2.50 M"), ("100B", "100.00 B"), ("1T", "1,000 B"),
     ("2.5T", "2,500 B")],
)  # fmt: skip
def test_a_budget_is_echoed_in_the_units_it_was_given_in(typed, said):
    assert human_count(parse_budget(typed)) == said
