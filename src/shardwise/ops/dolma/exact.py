"""``dolma mix`` streams that match each listed document, and its attributes, exactly.

dolma 1.2.1 expands every path of a stream's ``documents`` as a pattern, and finds a
document's attributes by expanding its *own name* again under ``attributes/<set>/`` (the
first match wins). Measured (``tests/test_dolma_mix.py``):

- on a local disk ``*``, ``?`` and ``[`` are glob characters: ``q?.json.gz`` beside
  ``q1.json.gz`` is mixed with ``q1``'s attributes (``Mismatched ids``). The documents
  are listed escaped (``q[?].json.gz`` matches that file only), and a file whose name
  matches another attributes file is read from a set of its own: a copy that holds no
  file its name matches. A name with ``[`` never matches itself: refused.
- on S3 only ``*`` is one, and nothing escapes it: ``q*.json.gz`` beside ``q1.json.gz``
  mixes ``q1`` twice. Such a name is refused; ``?`` and ``[`` are plain characters there.
"""

from __future__ import annotations

import fnmatch
import glob
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shardwise.errors import ConfigError
from shardwise.store.location import Location


@dataclass(frozen=True)
class Matching:
    """How dolma matches names on one store: its pattern characters, and whether they
    can be escaped (``[?]``)."""

    wild: frozenset[str]
    escapes: bool

    def has_magic(self, rel: str) -> bool:
        """Whether dolma would read ``rel`` as a pattern rather than a name."""
        return not self.wild.isdisjoint(rel)


LOCAL = Matching(frozenset("*?["), escapes=True)
S3 = Matching(frozenset("*"), escapes=False)


def matching(location: Location) -> Matching:
    """How dolma matches the names under ``location``."""
    return S3 if location.remote else LOCAL


def corpus_matching(documents: Location) -> tuple[Matching, Callable[[], set[str]]]:
    """How dolma matches the names of ``documents``, and the listing of the corpus
    (taken only when :func:`group` needs it)."""
    return matching(documents), lambda: {rel for rel, _ in documents.list_files()}


def matches(pattern: str, rel: str) -> bool:
    """Whether the glob ``pattern`` (a relative path) matches ``rel``: part by part, a
    ``*`` or ``?`` never crossing a ``/``, as dolma's glob expands it."""
    parts, names = pattern.split("/"), rel.split("/")
    if len(parts) != len(names):
        return False
    return all(fnmatch.fnmatchcase(n, p) for p, n in zip(parts, names, strict=True))


@dataclass(frozen=True)
class AttributeSets:
    """The run's files grouped by the attribute set dolma finds each one's attributes
    in: ``main`` in the run's own set; each of ``extra`` in a set holding only it."""

    main: tuple[str, ...]
    extra: tuple[tuple[str, ...], ...]

    def only(self, keep: Callable[[str], bool]) -> AttributeSets:
        """The same sets holding only the files ``keep`` holds for (a set may empty)."""
        main = tuple(r for r in self.main if keep(r))
        return AttributeSets(main, tuple(tuple(r for r in g if keep(r)) for g in self.extra))


def group(
    files: Sequence[str],
    present: set[str],
    how: Matching = LOCAL,
    documents: Callable[[], set[str]] = set,
) -> AttributeSets:
    """``files`` grouped so that dolma finds each one's own attributes among ``present``
    (the attributes files there are): a name that as a pattern matches another goes to
    an extra set, shared only with names that match none of its members (nor they it).
    ``documents`` lists the corpus, read only where a name cannot be escaped."""
    refused = _unfindable(files, how, documents)
    if refused:
        raise ConfigError(refused)
    main: list[str] = []
    extra: list[list[str]] = []
    for rel in files:
        if not how.has_magic(rel) or not any(matches(rel, o) for o in present if o != rel):
            main.append(rel)
            continue
        home = next((g for g in extra if not any(_clash(rel, o) for o in g)), None)
        if home is None:
            extra.append([rel])
        else:
            home.append(rel)
    return AttributeSets(tuple(main), tuple(tuple(g) for g in extra))


def _unfindable(files: Sequence[str], how: Matching, documents: Callable[[], set[str]]) -> str:
    """Why dolma cannot mix some of ``files`` exactly (empty: it can)."""
    if how.escapes:
        bad = [rel for rel in files if "[" in rel]
        why = "its own name as a glob pattern, and a name with '[' does not match itself"
    else:
        starred = [rel for rel in files if how.has_magic(rel)]
        corpus = documents() if starred else set()
        bad = [r for r in starred if any(matches(r, o) for o in corpus if o != r)]
        why = "each listed name as a pattern on S3 where '*' cannot be escaped, and these "
        why += "names match other documents too (which it would mix again)"
    if not bad:
        return ""
    char = "'['" if how.escapes else "'*'"
    shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3:,} more" if len(bad) > 3 else "")
    msg = f"dolma mix cannot mix {len(bad):,} file(s) exactly ({shown}): it expands {why}. "
    msg += f"Rename them in the corpus (without {char}), then run `shardwise plan --extend` "
    return msg + "and snakemake to label them under the new name"


def _clash(a: str, b: str) -> bool:
    return matches(a, b) or matches(b, a)


def extra_name(name: str, index: int) -> str:
    """The name of the ``index``-th extra attribute set of the set ``name``."""
    return f"{name}-exact-{index}"


def write_extra_sets(attributes: Location, name: str, sets: AttributeSets) -> list[Location]:
    """Copy each extra set's attributes beside the run's set (what was there before is
    removed: dolma would expand a name against it too); the sets' locations."""
    parent = attributes.uri.rsplit("/", 1)[0]
    written = []
    for index, files in enumerate(sets.extra, start=1):
        target = Location(f"{parent}/{extra_name(name, index)}", attributes.options)
        for rel, _ in target.list_files():
            if rel not in files:
                target.remove(rel)
        for rel in files:
            target.write_bytes(rel, attributes.read_bytes(rel))
        written.append(target)
    return written


def streams(
    stream: str, documents: Location, name: str, sets: AttributeSets
) -> list[tuple[str, list[str], str]]:
    """The streams of one selection, each (stream name, document paths, attribute set):
    the main set's files, then one per non-empty extra set; every path escaped so that
    it matches its one file."""
    how = matching(documents)
    out = []
    if sets.main:
        out.append((stream, [exact(documents.address(rel), how) for rel in sets.main], name))
    for index, files in enumerate(sets.extra, start=1):
        if files:
            paths = [exact(documents.address(rel), how) for rel in files]
            out.append((f"{stream}-exact-{index}", paths, extra_name(name, index)))
    return out


def exact(address: str, how: Matching = LOCAL) -> str:
    """``address`` as a pattern that matches that one path where ``how`` can escape
    (``?`` as ``[?]``); as it is elsewhere."""
    return glob.escape(address) if how.escapes and how.has_magic(address) else address
