"""What a reader is asked for and what it gives back: the fields (dotted paths), one
file's documents with their data-quality counts, and the error for a field no row has."""

import difflib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from shardwise.errors import FieldMissingError

#: Data-quality counts a file's stats hold under ``counts`` (views add them up).
QUALITY_COUNTS = (
    "missing_text", "null_texts", "empty_texts", "non_string_texts", "missing_id", "null_ids",
    "duplicate_ids", "missing_url", "null_urls", "invalid_utf8_lines", "invalid_utf8_values",
    "utf8_bom_lines",
)  # fmt: skip
#: The count a null value of each field goes to.
NULL_COUNTS = {"id": "null_ids", "text": "null_texts", "url": "null_urls"}
#: The config key behind each field, for messages that say what to fix.
CONFIG_KEYS = {"id": "input.id_field", "text": "input.text_field", "url": "input.url_field"}


@dataclass(frozen=True)
class FieldPaths:
    """Where the values live in a record (dotted paths allowed); ``url`` None when no
    classifier reads it (then neither read nor required)."""

    id: str = "id"
    text: str = "text"
    url: str | None = "url"

    def wanted(self) -> dict[str, str]:
        """Role (id, text, url) -> path, for the fields that are read."""
        out = {"id": self.id, "text": self.text}
        if self.url is not None:
            out["url"] = self.url
        return out


@dataclass(kw_only=True)
class Documents:
    """One file's documents in input order."""

    ids: list[str | None]
    texts: list[str]
    urls: list[str]
    counts: Counter[str] = field(default_factory=Counter)
    #: Per row, the JSON text of an id that is not a JSON string (None for a string id);
    #: None when every id is a string: dolma mix matches ids by JSON type (``0 != "0"``).
    id_json: list[str | None] | None = None

    def __len__(self) -> int:
        return len(self.texts)


def absent_field_error(
    where: str, role: str, path: str, rows: int, available: Iterable[str]
) -> FieldMissingError:
    """The error for a configured field that no row of a file has (names the fix)."""
    found = tuple(sorted(set(available)))
    advice = field_advice(CONFIG_KEYS[role], path, found)
    msg = f"{where}: {CONFIG_KEYS[role]} {path!r} is in none of its {rows:,} row(s); {advice}"
    return FieldMissingError(
        msg, config_key=CONFIG_KEYS[role], path=path, found=found, advice=advice
    )


def field_advice(
    config_key: str, path: str, found: Iterable[str], kept: str = "nothing of this file was written"
) -> str:
    """What to do about a field no row has: the fields found, the closest one, the fix,
    and ``kept``: what the failure left as it was."""
    found = sorted(set(found))
    close = difflib.get_close_matches(path, found, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(found[:40]) + (f", ... ({len(found)} in all)" if len(found) > 40 else "")
    text = f"fields found: {listed or '(none)'}.{hint} Fix {config_key} in the config and run "
    return text + f"again ({kept})."
