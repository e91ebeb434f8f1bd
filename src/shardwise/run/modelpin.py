"""The classifiers' identity as run.json pins it (``models``), and how a model differs.

A model replaced in place (same path, other weights) or a hub id whose cached snapshot
moved to another revision would otherwise label part of an output with one model and
the rest with another, silently. Per classifier run.json keeps what identifies its
weights and tokenizer: ``content_hash`` (config and weights), ``tokenizer_hash`` (its
tokenizer files) and, for a hub id, ``revision`` (the snapshot's commit). Each file's
stats record the same (``models``); a key either side lacks (stats written before it was
recorded) is not compared.
"""

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

#: What identifies a classifier's model, in the order a difference is named.
KEYS = ("content_hash", "tokenizer_hash", "revision")

Identity = Mapping[str, Any]


def pin_of(identity: Identity) -> dict[str, Any]:
    """The pinned part of a model identity (``modelcheck.identity``'s keys)."""
    return {k: identity.get(k) for k in KEYS if identity.get(k) is not None}


def differences(pinned: Identity, found: Identity) -> list[tuple[str, Any, Any]]:
    """(key, pinned, found) for each key both sides know and that differs."""
    return [
        (k, pinned[k], found[k])
        for k in KEYS
        if pinned.get(k) is not None and found.get(k) is not None and pinned[k] != found[k]
    ]


def mismatched(
    pins: Mapping[str, Identity], found: Mapping[str, Identity]
) -> dict[str, list[tuple[str, Any, Any]]]:
    """Per classifier whose found model differs from its pin, how."""
    out = {}
    for name, pinned in pins.items():
        diffs = differences(pinned, found.get(name) or {})
        if diffs:
            out[name] = diffs
    return out


def describe(diffs: list[tuple[str, Any, Any]]) -> str:
    """``content_hash pinned 1a2b3c4d5e6f, found 9f8e7d6c5b4a`` (short hashes)."""
    return "; ".join(f"{k} pinned {_short(a)}, found {_short(b)}" for k, a, b in diffs)


def _short(value: Any) -> str:
    text = str(value)
    return text[:12] if len(text) == 64 else text


def refusal(name: str, model: str, diffs: list[tuple[str, Any, Any]]) -> str:
    """One line: the classifier, its pinned and found identity, and the ways forward."""
    text = f"classifier {name!r}: the model at {model} is not the one this run labelled "
    text += f"with ({describe(diffs)}): files labelled with it would mix two models in one "
    text += "output. Restore the pinned model (the same weights, tokenizer and revision), or "
    return text + "label with this one under a new run_dir and output.uri"


def derive(
    per_file: Iterable[tuple[str, Mapping[str, Identity]]], current: Mapping[str, Identity]
) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """The pin of a run labelled before pins were recorded, from its files' stats (file,
    models): per classifier the identity the current model has if files were labelled
    with it (so ``verify --repair`` can relabel the others), else the commonest; and per
    classifier the files labelled with another."""
    seen: dict[str, Counter[tuple[tuple[str, Any], ...]]] = {}
    files: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for rel, models in per_file:
        for name, identity in models.items():
            key = tuple(sorted(pin_of(identity).items()))
            if key:
                seen.setdefault(name, Counter())[key] += 1
                files.setdefault(name, []).append((rel, dict(key)))
    pins: dict[str, dict[str, Any]] = {}
    for name, counts in seen.items():
        now = pin_of(current.get(name) or {})
        agrees = [dict(k) for k in counts if not differences(dict(k), now)]
        pins[name] = agrees[0] if agrees else dict(counts.most_common(1)[0][0])
    for name in current:
        pins.setdefault(name, pin_of(current[name]))
    mixed = {
        name: sorted(rel for rel, got in found if differences(pins[name], got))
        for name, found in files.items()
    }
    return pins, {name: rels for name, rels in mixed.items() if rels}
