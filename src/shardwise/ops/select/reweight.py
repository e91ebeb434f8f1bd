"""Target weights from observed ones: scale the domains holding a label, then normalise.

The usual step between ``shardwise domains --format weborganizer`` (what the corpus holds)
and ``shardwise select --weights`` (what the mix should hold) is "this topic x3": done by
hand it is a script per campaign, and an error in it (a label misspelt, weights that no
longer sum to 1) surfaces only in the selection. Entries keep their shape
(WebOrganizer's ``domain_statistics``); the estimate's interval fields are dropped, as
they describe the observed share, not the target.
"""

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shardwise.config import weborganizer_labels
from shardwise.errors import ConfigError
from shardwise.ops.common.text import near_labels
from shardwise.ops.select.plan import read_weights

#: Keys of an entry that describe the observed estimate, not a target weight.
_OBSERVED = ("estimated", "weight_low", "weight_high")


def parse_scale(text: str) -> tuple[str, float]:
    """``LABEL=FACTOR`` (``Health=3``, ``Science & Tech.=0.5``) as (label, factor)."""
    label, sep, factor = text.rpartition("=")
    try:
        value = float(factor)
    except ValueError:
        value = math.nan
    if not sep or not label or not math.isfinite(value) or value < 0:
        raise ConfigError(f"--scale {text!r}: give LABEL=FACTOR with a factor >= 0 (Health=3)")
    return label, value


def entry_labels(entry: Mapping[str, Any]) -> tuple[str, ...]:
    """The label names of one entry: its ``labels``, else its domain's names (an id of a
    pair is WebOrganizer's topic id first, then its format id)."""
    if isinstance(entry.get("labels"), list):
        return tuple(str(x) for x in entry["labels"])
    domain = entry["domain"]
    parts = domain if isinstance(domain, list) else [domain]
    if all(isinstance(p, str) for p in parts):
        return tuple(parts)
    if len(parts) != 2:
        msg = f'domain {domain!r} is an id without its labels: add "labels" to the entry, '
        raise ConfigError(msg + "or write the domain by name")
    sets = weborganizer_labels()
    names = [sets[k] for k in ("topic", "format")]
    try:
        return tuple(p if isinstance(p, str) else names[i][p] for i, p in enumerate(parts))
    except IndexError:
        raise ConfigError(f"domain {domain!r}: an id that is no WebOrganizer label") from None


def scaled(
    entries: Sequence[Mapping[str, Any]], factors: Sequence[tuple[str, float]]
) -> list[dict[str, Any]]:
    """Each entry's weight times the factor of every label it holds, normalised to sum 1."""
    labels = [entry_labels(e) for e in entries]
    known = sorted({name for names in labels for name in names})
    for label, _ in factors:
        if label not in known:
            raise ConfigError(
                f"--scale {label!r}: no domain holds this label{near_labels(label, known)}"
            )
    weights = []
    for entry, names in zip(entries, labels, strict=True):
        weight = float(entry["weight"])
        for label, factor in factors:
            weight *= factor if label in names else 1.0
        weights.append(weight)
    total = sum(weights)
    if total <= 0:
        raise ConfigError("--scale: every weight is 0 after scaling; nothing to select")
    out = []
    for entry, weight in zip(entries, weights, strict=True):
        kept = {k: v for k, v in entry.items() if k not in _OBSERVED}
        out.append({**kept, "weight": weight / total})
    return out


def reweight(path: Path, factors: Sequence[tuple[str, float]]) -> list[dict[str, Any]]:
    """The weights file at ``path`` (checked as ``select --weights`` checks it), scaled."""
    read_weights(path)
    entries = json.loads(Path(path).read_text("utf-8"))
    try:
        return scaled(entries, factors)
    except ConfigError as e:
        raise ConfigError(f"--weights {path}: {e}") from None
