"""The dry run reads a sample: a field no file has fails planning, not every shard job.

A typo in ``input.text_field`` caught in the jobs costs a GPU allocation and its retries
per shard. So before anything is pinned a few files per format, spread over the sorted
listing, are read with the reader's own check: a field absent from every sampled file of
a format is refused; one absent from only some is a note (those files fail in their jobs).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from shardwise.errors import ConfigError, FieldMissingError, InputError
from shardwise.run.fields import FieldPaths, field_advice
from shardwise.run.reader import check_fields, file_format
from shardwise.store.location import Location

#: Files read per input format; a few small reads, even on object storage.
SAMPLE_FILES = 3


def spread(files: Sequence[str], count: int) -> list[str]:
    """``count`` of ``files`` evenly spaced from the first to the last (all when fewer)."""
    if count <= 0 or not files:
        return []
    if len(files) <= count:
        return list(files)
    if count == 1:
        return [files[len(files) // 2]]
    step = (len(files) - 1) / (count - 1)
    return [files[round(i * step)] for i in range(count)]


def sample(files: Sequence[tuple[str, int]], fmt: str, count: int) -> dict[str, list[str]]:
    """Per input format present, the files to read (``files`` sorted, as planned)."""
    by_format: dict[str, list[str]] = {}
    for rel, _size in files:
        kind = file_format(rel) if fmt == "auto" else fmt
        by_format.setdefault(kind, []).append(rel)
    return {kind: spread(rels, count) for kind, rels in sorted(by_format.items())}


@dataclass(frozen=True)
class SampleResult:
    """What reading the sample found: files read, and notes for the planning report."""

    files: int
    notes: tuple[str, ...] = ()


def check_sample(
    source: Location,
    files: Sequence[tuple[str, int]],
    fields: FieldPaths,
    fmt: str = "auto",
    count: int = SAMPLE_FILES,
) -> SampleResult:
    """Read the sample; ConfigError when a field is in none of a format's sampled files (a
    line per field and format). An unreadable file says nothing of the config: noted."""
    source.remember_sizes(dict(files))  # no HEAD per sampled file on object storage
    picked = sample(files, fmt, count)
    notes: list[str] = []
    refusals: list[str] = []
    read = 0
    for kind, rels in picked.items():
        missing: dict[tuple[str, str], list[tuple[str, FieldMissingError]]] = {}
        readable = 0
        for rel in rels:
            try:
                check_fields(source, rel, fields, kind)
            except FieldMissingError as e:
                missing.setdefault((e.config_key, e.path), []).append((rel, e))
            except InputError as e:
                notes.append(f"sampled file unreadable (its job will fail and name it): {e}")
                continue
            readable += 1
        read += readable
        for (key, path), errors in missing.items():
            names = ", ".join(source.url(rel) for rel, _e in errors)
            if len(errors) == readable:
                found = sorted({f for _rel, e in errors for f in e.found})
                advice = field_advice(key, path, found, "nothing was pinned or submitted")
                text = f"{key} {path!r} is in none of the {len(errors)} sampled {kind} file(s) "
                refusals.append(text + f"({names}); {advice}")
                continue
            text = f"{key} {path!r} is absent from {len(errors)} of {readable} sampled {kind} "
            notes.append(text + f"file(s) ({names}): such files fail in their jobs, named there")
    if refusals:
        raise ConfigError("\n".join(refusals))
    return SampleResult(read, tuple(notes))
