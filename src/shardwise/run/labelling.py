"""What decides a label besides the models, as run.json pins it and each file's stats
record it (``labelling``): the reader's fields, the truncation length, the input
templates and the counting tokenizer. Two files labelled under different set-ups would
not be one labelling; a field a record lacks (written before it was kept) is None.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any, Self

from shardwise.run.record import Fields

#: (field, pinned, found): one way two set-ups differ.
Difference = tuple[str, Any, Any]


@dataclass(frozen=True, kw_only=True)
class Labelling:
    """One labelling set-up. ``url_field``: only when an input uses the url;
    ``templates``: per input kind used, what it feeds its classifier;
    ``count_tokenizer``: the content hash of ``domains.tokenizer``, when one counts."""

    id_field: str | None = None
    text_field: str | None = None
    url_field: str | None = None
    max_length: int | None = None
    templates: dict[str, str] | None = None
    count_tokenizer: str | None = None

    def differences(self, other: "Labelling") -> list[Difference]:
        """(field, this, other) for each field that differs, in field order."""
        out = []
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a != b:
                out.append((f.name, a, b))
        return out

    def to_json(self) -> dict[str, Any]:
        """As run.json and the stats write it (no ``count_tokenizer`` when none counts)."""
        data = dataclasses.asdict(self)
        if self.count_tokenizer is None:
            del data["count_tokenizer"]
        return data

    @classmethod
    def from_json(cls, data: Any, where: str) -> Self:
        """One set-up as a file records it; RecordError naming ``where`` otherwise."""
        return Fields.of(data, where).into(cls)
