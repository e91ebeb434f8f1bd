"""Range expressions for shard sets: ``1-2,5-10,99``, the notation of SLURM's ``--array``
and NeMo Curator's ``retry_array.py`` (two consecutive numbers are ``1-2``, as there)."""

from collections.abc import Iterable

import numpy as np


def runs(numbers: Iterable[int]) -> list[tuple[int, int]]:
    """The maximal runs ``(first, last)`` of consecutive values, ascending (duplicates and
    order do not matter: listings come in no useful order)."""
    values = np.unique(np.fromiter((int(n) for n in numbers), dtype=np.int64))
    if values.size == 0:
        return []
    # A run breaks wherever the gap to the previous value is not exactly one.
    breaks = np.flatnonzero(np.diff(values) != 1)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [values.size - 1]))
    return [(int(values[s]), int(values[e])) for s, e in zip(starts, ends, strict=True)]


def compress(numbers: Iterable[int]) -> str:
    """Write ``numbers`` as a range expression; the empty set gives ``""``.

    >>> compress([99, 1, 2, 5, 6, 7, 8, 9, 10])
    '1-2,5-10,99'
    """
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs(numbers))


def expand(expression: str) -> list[int]:
    """Parse a range expression (spaces, overlaps and any order allowed) into its sorted
    numbers; ValueError naming a bad item rather than guessing (a wrong list skips work).

    >>> expand("1-2, 5-7,99")
    [1, 2, 5, 6, 7, 99]
    """
    text = expression.strip()
    if not text:
        return []
    out: set[int] = set()
    for raw in text.split(","):
        item = raw.strip()
        first, sep, last = item.partition("-")
        try:
            a = _nonnegative(first)
            b = _nonnegative(last) if sep else a
        except ValueError:
            raise ValueError(f"bad range item {item!r} in {expression!r}") from None
        if b < a:
            raise ValueError(f"descending range {item!r} in {expression!r}")
        out.update(range(a, b + 1))
    return sorted(out)


def _nonnegative(text: str) -> int:
    """Parse a plain non-negative decimal (no sign, no spaces inside)."""
    if not text.isdigit() or not text.isascii():
        raise ValueError(text)
    return int(text)
