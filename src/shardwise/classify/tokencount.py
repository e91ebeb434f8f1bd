"""Token counts in the training tokenizer (``domains.tokenizer``).

Every step after labelling (WebOrganizer's statistics and selection, Dolma's mixes) weighs
by tokens of the model being trained, not the classifiers' truncated ones: each job counts
every document's full tokens on its reader thread, into the sidecar and the label counts;
the tokenizer's content hash is pinned like a model. Long texts are counted in pieces cut
before whitespace (the same count for whitespace-split pre-tokenizers), encoded a batch
of at most ``BATCH_CHARS`` characters at a time and counted as they come: an encoding
holds ~100 bytes per token, so one 50 MB text encoded whole held gigabytes
(``bench/long_docs.py`` measures both).
"""

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import numpy as np
from tokenizers import Tokenizer

from shardwise.classify.tokenization import backend_hash
from shardwise.errors import ModelError

#: Characters per piece of a long text (cut before the next whitespace).
CHUNK = 1_000_000
#: Characters encoded at once (the pieces of one batch are held until counted).
BATCH_CHARS = 2 * CHUNK
_SPACE = re.compile(r"\s")


@dataclass(frozen=True, eq=False)
class TokenCounter:
    """A tokenizer that counts; ``identity`` is its content hash (pinned)."""

    backend: Tokenizer
    identity: str
    source: str

    @classmethod
    def load(cls, source: str) -> Self:
        """Load ``tokenizer.json`` from a directory or a cached hub snapshot."""
        path = Path(source).expanduser()
        where = path if path.exists() else _cached_snapshot(source)
        try:
            backend = Tokenizer.from_file(str(where / "tokenizer.json"))
        except Exception as exc:  # tokenizers raises its own exception types
            msg = f"config domains.tokenizer {source!r}: cannot load {where}/tokenizer.json "
            msg += f"({exc}); give a directory or hub id of a fast tokenizer (save_pretrained "
            raise ModelError(msg + "writes tokenizer.json)") from exc
        backend.no_truncation()
        backend.no_padding()
        return cls(backend, backend_hash(backend), source)

    def count(self, texts: Sequence[str]) -> np.ndarray:
        """Each text's full token count (no special tokens), int64."""
        counts = np.zeros(len(texts), np.int64)
        for owners, pieces in _batches(texts):
            encoded = self.backend.encode_batch_fast(pieces, add_special_tokens=False)
            sizes = np.fromiter((len(e.ids) for e in encoded), np.int64, len(encoded))
            del encoded  # before the next batch is encoded
            np.add.at(counts, np.asarray(owners, np.int64), sizes)
        return counts


def _batches(texts: Sequence[str]) -> Iterator[tuple[list[int], list[str]]]:
    """The texts' pieces in batches of at most ``BATCH_CHARS`` characters (or one piece),
    each with the index of the text it is part of; a text that is no string has none."""
    owners: list[int] = []
    pieces: list[str] = []
    size = 0
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            continue
        for piece in _pieces(text):
            if pieces and size + len(piece) > BATCH_CHARS:
                yield owners, pieces
                owners, pieces, size = [], [], 0
            owners.append(i)
            pieces.append(piece)
            size += len(piece)
    if pieces:
        yield owners, pieces


def _pieces(text: str) -> Iterator[str]:
    """``text`` cut before whitespace about every ``CHUNK`` characters."""
    start = 0
    while len(text) - start > CHUNK:
        match = _SPACE.search(text, start + CHUNK)
        if match is None:
            break
        yield text[start : match.start()]
        start = match.start()
    yield text[start:] if start else text


def _cached_snapshot(source: str) -> Path:
    """A hub id's files from the local Hugging Face cache (never a download in a job)."""
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - only for hub ids

    try:
        return Path(snapshot_download(source, local_files_only=True))
    except Exception as exc:  # huggingface_hub raises many types
        msg = f"config domains.tokenizer {source!r}: no such directory, and not in the local "
        msg += f"Hugging Face cache ({exc}); download it first (huggingface-cli download "
        msg += f"{source}) or give a directory"
        raise ModelError(msg) from exc
