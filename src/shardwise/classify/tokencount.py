"""Token counts in the training tokenizer (``domains.tokenizer``).

Every step after labelling weighs by tokens of the model being trained (WebOrganizer's
``domain_statistics.py``, its selection, Dolma 3's mixes), not by the classifiers'
truncated tokens. When a run sets ``domains.tokenizer`` (a local directory with a
``tokenizer.json``, or a hub id in the local cache), each job counts every labelled
document's full, untruncated tokens on its reader thread, beside the classifiers'
tokenization and never on the GPU's path; the counts go into the sidecar (``tokens``)
and the label counts. The tokenizer's content hash is pinned in run.json like a model.

A text longer than ``CHUNK`` characters is counted in pieces cut before whitespace (so
a 50 MB text never becomes one 10M-token encoding in memory). For whitespace-split
pre-tokenizers (BERT's, byte-level BPE's leading-space words) that is the same count.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from shardwise.classify.tokenization import backend_hash
from shardwise.errors import ModelError

#: Characters per piece of a long text (cut before the next whitespace).
CHUNK = 1_000_000
_SPACE = re.compile(r"\s")


@dataclass(frozen=True, eq=False)
class TokenCounter:
    """A tokenizer that counts; ``identity`` is its content hash (pinned)."""

    backend: Tokenizer
    identity: str
    source: str

    @classmethod
    def load(cls, source: str) -> TokenCounter:
        """Load ``tokenizer.json`` from a directory or a cached hub snapshot."""
        path = Path(source).expanduser()
        where = path if path.exists() else _cached_snapshot(source)
        try:
            backend = Tokenizer.from_file(str(where / "tokenizer.json"))
        except Exception as exc:  # tokenizers raises its own exception types
            msg = (
                f"config domains.tokenizer {source!r}: cannot load {where}/tokenizer.json "
                f"({exc}); give a directory or hub id of a fast tokenizer (save_pretrained "
                "writes tokenizer.json)"
            )
            raise ModelError(msg) from exc
        backend.no_truncation()
        backend.no_padding()
        return cls(backend, backend_hash(backend), source)

    def count(self, texts: Sequence[str]) -> np.ndarray:
        """Each text's full token count (no special tokens), int64."""
        pieces: list[str] = []
        owner: list[int] = []
        for i, text in enumerate(texts):
            for piece in _pieces(text if isinstance(text, str) else ""):
                pieces.append(piece)
                owner.append(i)
        counts = np.zeros(len(texts), np.int64)
        if pieces:
            lengths = [
                len(e.ids) for e in self.backend.encode_batch_fast(pieces, add_special_tokens=False)
            ]
            np.add.at(counts, np.asarray(owner, np.int64), np.asarray(lengths, np.int64))
        return counts


def _pieces(text: str) -> list[str]:
    """``text`` cut before whitespace about every ``CHUNK`` characters."""
    if len(text) <= CHUNK:
        return [text]
    out, start = [], 0
    while len(text) - start > CHUNK:
        match = _SPACE.search(text, start + CHUNK)
        if match is None:
            break
        out.append(text[start : match.start()])
        start = match.start()
    out.append(text[start:])
    return out


def _cached_snapshot(source: str) -> Path:
    """A hub id's files from the local Hugging Face cache (never a download in a job)."""
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - only for hub ids

    try:
        return Path(snapshot_download(source, local_files_only=True))
    except Exception as exc:  # huggingface_hub raises many types
        msg = (
            f"config domains.tokenizer {source!r}: no such directory, and not in the local "
            f"Hugging Face cache ({exc}); download it first (huggingface-cli download "
            f"{source}) or give a directory"
        )
        raise ModelError(msg) from exc
