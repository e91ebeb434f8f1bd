"""The classifiers' identity as run.json pins it (``models``), and how a model differs.

A model replaced in place (same path, other weights) or a hub id whose cached snapshot
moved to another revision would otherwise label part of an output with one model and
the rest with another, silently. Per classifier run.json keeps what identifies its
weights and tokenizer: ``content_hash`` (config and weights), ``tokenizer_hash`` (its
tokenizer files) and, for a hub id, ``revision`` (the snapshot's commit). Each file's
stats record the same (``models``); a key either side lacks (stats written before it was
recorded) is not compared.
"""

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from shardwise.run.record import Fields

#: (key, pinned, found): one way a model differs from its pin.
Difference = tuple[str, str, str]


@dataclass(frozen=True)
class ModelIdentity:
    """What identifies one classifier's model (module docstring), in the order a
    difference is named; ``model``: the name it was given (a file's stats record it, a
    pin does not: the pin is of the weights, wherever they lie)."""

    content_hash: str | None = None
    tokenizer_hash: str | None = None
    revision: str | None = None
    model: str | None = None

    def pin(self) -> Self:
        """The pinned part: the identity without the model's name."""
        return dataclasses.replace(self, model=None)

    def differences(self, found: "ModelIdentity") -> list[Difference]:
        """(key, pinned, found) for each key both sides know and that differs."""
        out = []
        for key in KEYS:
            a, b = getattr(self, key), getattr(found, key)
            if a is not None and b is not None and a != b:
                out.append((key, a, b))
        return out

    def to_json(self) -> dict[str, str]:
        """The keys it knows (a pin: no ``model``; a model without files: no hashes)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Self:
        """One identity as a file records it; RecordError naming ``where`` otherwise."""
        return Fields.of(data, where).into(cls)


#: What identifies a classifier's model, in the order a difference is named.
KEYS = tuple(f.name for f in dataclasses.fields(ModelIdentity) if f.name != "model")


def mismatched(
    pins: Mapping[str, ModelIdentity], found: Mapping[str, ModelIdentity]
) -> dict[str, list[Difference]]:
    """Per classifier whose found model differs from its pin, how."""
    out = {}
    for name, pinned in pins.items():
        diffs = pinned.differences(found.get(name) or ModelIdentity())
        if diffs:
            out[name] = diffs
    return out


def pins(found: Mapping[str, ModelIdentity]) -> dict[str, ModelIdentity]:
    """The pin of each classifier's identity (:meth:`ModelIdentity.pin`)."""
    return {name: identity.pin() for name, identity in found.items()}


def describe(diffs: list[Difference]) -> str:
    """``content_hash pinned 1a2b3c4d5e6f, found 9f8e7d6c5b4a`` (short hashes)."""
    return "; ".join(f"{k} pinned {_short(a)}, found {_short(b)}" for k, a, b in diffs)


def _short(value: str) -> str:
    return value[:12] if len(value) == 64 else value


def refusal(name: str, model: str, diffs: list[Difference]) -> str:
    """One line: the classifier, its pinned and found identity, and the ways forward."""
    text = f"classifier {name!r}: the model at {model} is not the one this run labelled "
    text += f"with ({describe(diffs)}): files labelled with it would mix two models in one "
    text += "output. Restore the pinned model (the same weights, tokenizer and revision), or "
    return text + "label with this one under a new run_dir and output.uri"


def derive(
    per_file: Iterable[tuple[str, Mapping[str, ModelIdentity]]],
    current: Mapping[str, ModelIdentity],
) -> tuple[dict[str, ModelIdentity], dict[str, list[str]]]:
    """The pin of a run labelled before pins were recorded, from its files' stats (file,
    models): per classifier the identity the current model has if files were labelled
    with it (so ``verify --repair`` can relabel the others), else the commonest; and per
    classifier the files labelled with another."""
    seen: dict[str, Counter[ModelIdentity]] = {}
    files: dict[str, list[tuple[str, ModelIdentity]]] = {}
    for rel, models in per_file:
        for name, identity in models.items():
            pin = identity.pin()
            if pin != ModelIdentity():
                seen.setdefault(name, Counter())[pin] += 1
                files.setdefault(name, []).append((rel, pin))
    derived: dict[str, ModelIdentity] = {}
    for name, counts in seen.items():
        now = (current.get(name) or ModelIdentity()).pin()
        agrees = [pin for pin in counts if not pin.differences(now)]
        derived[name] = agrees[0] if agrees else counts.most_common(1)[0][0]
    for name in current:
        derived.setdefault(name, current[name].pin())
    mixed = {
        name: sorted(rel for rel, got in found if derived[name].differences(got))
        for name, found in files.items()
    }
    return derived, {name: rels for name, rels in mixed.items() if rels}
