"""Shared tokenization: tokenize each text once and each url once, for every classifier.

For a BERT-style pipeline the blank lines of ``"{url}\n\n{text}"`` are a hard word
boundary, so each classifier's ids are assembled from the two pieces; that is verified on
a sample of every call (a mismatch, or another pipeline, encodes whole strings). No torch.
"""

import hashlib
import heapq
import json
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Self

import numpy as np
from tokenizers import Tokenizer

from shardwise.run.labelling import Labelling

INPUT_KINDS: tuple[str, ...] = ("url_text", "text")
#: What each input kind feeds its classifier, as ``format_input`` builds it (pinned in
#: run.json: a different template is a different labelling).
TEMPLATES = {"url_text": "{url}\n\n{text}", "text": "{text}"}

#: Characters after which a text may be cut without changing earlier tokens: plain ASCII
#: whitespace only (str.isspace() also matches control separators that BertNormalizer deletes).
_CUT_AFTER = re.compile(r"[ \t\n\r]")
#: Anything but whitespace: a word after the cut.
_WORD = re.compile(r"\S")
#: Characters of text kept per needed token before looking for a cut point.
_CHARS_PER_TOKEN_BOUND = 10
_MIN_CUT_CHARS = 4096
#: Longest text (chars) the per-call sample check encodes whole.
_VERIFY_MAX_CHARS = 400_000

_SPLITTABLE_NORMALIZERS = {None, "BertNormalizer", "Lowercase", "NFD", "NFC", "StripAccents"}
_SPLITTABLE_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
_SPLITTABLE_MODELS = {"WordPiece"}
_SPLITTABLE_POST = {None, "TemplateProcessing", "BertProcessing"}


def backend_hash(backend: Tokenizer) -> str:
    """Content hash of what a tokenizer does (vocab, normalizer, pre-tokenizer, template);
    runtime truncation and padding are not part of its identity."""
    data = json.loads(backend.to_str())
    data.pop("truncation", None)
    data.pop("padding", None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def labelling(
    id_field: str,
    text_field: str,
    url_field: str | None,
    max_length: int,
    kinds: Iterable[str],
    *,
    count_tokenizer: str | None = None,
) -> Labelling:
    """Everything besides the models that decides a label, as run.json pins it and each
    file's stats record it: the reader's fields (the url only when an input uses it), the
    truncation length, the templates, the counting tokenizer's hash (when there is one)."""
    used = sorted(set(kinds))
    return Labelling(
        id_field=id_field,
        text_field=text_field,
        url_field=url_field if "url_text" in used else None,
        max_length=int(max_length),
        templates={kind: TEMPLATES[kind] for kind in used},
        count_tokenizer=count_tokenizer,
    )


def format_input(kind: str, text: str, url: str) -> str:
    """The WebOrganizer input string for one document (the reference the ids must equal)."""
    if kind not in TEMPLATES:
        raise ValueError(f"unknown input kind {kind!r} (expected one of {INPUT_KINDS})")
    return TEMPLATES[kind].format(url=url, text=text)


@dataclass(frozen=True)
class StreamKey:
    """Identifies one id stream: classifiers with equal keys get identical input ids."""

    tokenizer_hash: str
    input: str
    max_length: int


@dataclass(kw_only=True)
class TokenStream:
    """Input ids of all documents for one :class:`StreamKey`, flat with offsets:
    ``ids[offsets[i]:offsets[i + 1]]`` is document ``i`` with specials, truncated;
    ``truncated[i]``: more tokens than fit (a length of ``max_length`` alone cannot tell)."""

    ids: np.ndarray  # int32, all documents concatenated
    offsets: np.ndarray  # int64, len n + 1
    lengths: np.ndarray  # int32, len n
    pad_id: int
    truncated: np.ndarray | None = None  # bool, len n

    def doc(self, index: int) -> list[int]:
        """Ids of one document (tests and debugging)."""
        return self.ids[self.offsets[index] : self.offsets[index + 1]].tolist()


@dataclass(kw_only=True)
class TokenizerInfo:
    """What shared tokenization needs to know about one distinct tokenizer."""

    hash: str
    backend: Tokenizer  # private copy: no truncation, no padding
    reference: Tokenizer  # private copy encoding like ``tokenizer(s, truncation=True)`` (per L)
    prefix_ids: tuple[int, ...]
    suffix_ids: tuple[int, ...]
    pad_id: int
    splittable: bool
    reason: str = ""  # why not splittable
    _reference_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, tokenizer_hash: str) -> Self:
        """Inspect a transformers fast tokenizer; decide whether its output can be assembled."""
        text = tokenizer.backend_tokenizer.to_str()
        backend = Tokenizer.from_str(text)
        backend.no_truncation()
        backend.no_padding()
        reference = Tokenizer.from_str(text)
        reference.no_padding()
        reference.no_truncation()
        probe_plain = backend.encode("a", add_special_tokens=False).ids
        probe_full = backend.encode("a", add_special_tokens=True).ids
        prefix: tuple[int, ...] = ()
        suffix: tuple[int, ...] = ()
        splittable, reason = _is_splittable(json.loads(text))
        start = _find_sublist(probe_full, probe_plain)
        if start < 0:
            splittable, reason = False, "special-token template could not be located"
        else:
            prefix = tuple(probe_full[:start])
            suffix = tuple(probe_full[start + len(probe_plain) :])
        pad_id = int(tokenizer.pad_token_id or 0)
        return cls(
            hash=tokenizer_hash,
            backend=backend,
            reference=reference,
            prefix_ids=prefix,
            suffix_ids=suffix,
            pad_id=pad_id,
            splittable=splittable,
            reason=reason,
        )

    def encode_reference(self, strings: list[str], max_length: int) -> list[list[int]]:
        """The tokenizer's own output: specials added, right-truncated to ``max_length``."""
        return self.encode_reference_truncated(strings, max_length)[0]

    def encode_reference_truncated(
        self, strings: list[str], max_length: int
    ) -> tuple[list[list[int]], list[bool]]:
        """:meth:`encode_reference` plus, per string, whether truncation cut tokens off."""
        with self._reference_lock:
            self.reference.enable_truncation(max_length=max_length)
            encodings = self.reference.encode_batch_fast(strings, add_special_tokens=True)
        return [e.ids for e in encodings], [bool(e.overflowing) for e in encodings]


def _find_sublist(haystack: list[int], needle: list[int]) -> int:
    for start in range(len(haystack) - len(needle) + 1):
        if haystack[start : start + len(needle)] == needle:
            return start
    return -1


def _component_types(node: Any) -> list[str | None]:
    """Types of a tokenizer.json component, flattening ``Sequence`` containers."""
    if node is None:
        return [None]
    kind = node.get("type")
    if kind == "Sequence":
        children = node.get("normalizers") or node.get("pretokenizers") or []
        children = children or node.get("processors") or []
        return [t for child in children for t in _component_types(child)]
    return [kind]


def _is_splittable(spec: dict[str, Any]) -> tuple[bool, str]:
    """True when url and text can be encoded separately and concatenated (see module doc)."""
    checks = {
        "normalizer": _SPLITTABLE_NORMALIZERS,
        "pre_tokenizer": _SPLITTABLE_PRE_TOKENIZERS,
        "post_processor": _SPLITTABLE_POST,
    }
    for key, allowed in checks.items():
        for kind in _component_types(spec.get(key)):
            if kind not in allowed:
                return False, f"{key} {kind!r} is not known to split at blank lines"
    if not _component_types(spec.get("pre_tokenizer"))[0]:
        return False, "no pre-tokenizer: words are not split at whitespace"
    model_type = (spec.get("model") or {}).get("type")
    if model_type not in _SPLITTABLE_MODELS:
        return False, f"model {model_type!r} is not WordPiece"
    for token in spec.get("added_tokens") or []:
        content = str(token.get("content", ""))
        if any(ch.isspace() for ch in content):
            return False, f"added token {content!r} contains whitespace"
    return True, ""


def _encode_texts(
    info: TokenizerInfo, texts: list[str], needed: int
) -> tuple[list[list[int]], list[int]]:
    """Each text's ids (of a prefix long enough for ``needed`` tokens, else whole), and 1
    where the text was cut before encoding and words remain after the cut: the text then
    has more tokens than were encoded (enough to count it as truncated)."""
    cut = [_cut_text(t, needed) for t in texts]
    encode = info.backend.encode_batch_fast
    text_ids = [e.ids for e in encode(cut, add_special_tokens=False)]
    few = [i for i, t in enumerate(text_ids) if len(t) < needed and len(cut[i]) < len(texts[i])]
    if few:  # the prefix gave too few tokens: encode those texts whole
        full = encode([texts[i] for i in few], add_special_tokens=False)
        for i, encoding in zip(few, full, strict=True):
            text_ids[i] = encoding.ids
            cut[i] = texts[i]
    # (a search, not a slice: the rest of a 50 MB text is not copied)
    pairs = zip(cut, texts, strict=True)
    beyond = [1 if len(c) < len(t) and _WORD.search(t, len(c)) else 0 for c, t in pairs]
    return text_ids, beyond


def _rows(
    info: TokenizerInfo,
    key: StreamKey,
    text_ids: list[list[int]],
    url_ids: list[list[int]],
    beyond: list[int],
) -> tuple[list[list[int]], list[bool]]:
    """One input kind's rows (special tokens around ids cut to ``max_length``) and which
    of them were truncated."""
    room = key.max_length - len(info.prefix_ids) - len(info.suffix_ids)
    prefix, suffix = list(info.prefix_ids), list(info.suffix_ids)
    if key.input == "text":
        rows = [prefix + ids[:room] + suffix for ids in text_ids]
        truncated = [len(t) + more > room for t, more in zip(text_ids, beyond, strict=True)]
        return rows, truncated
    if key.input != "url_text":
        raise ValueError(f"unknown input kind {key.input!r}")
    rows = []
    for uid, tid in zip(url_ids, text_ids, strict=True):
        if len(uid) >= room:
            rows.append(prefix + uid[:room] + suffix)
        else:
            rows.append(prefix + uid + tid[: room - len(uid)] + suffix)
    zipped = zip(url_ids, text_ids, beyond, strict=True)
    return rows, [len(u) + len(t) + more > room for u, t, more in zipped]


def _cut_text(text: str, needed_tokens: int) -> str:
    """A prefix of ``text`` ending after ASCII whitespace, long enough for ``needed_tokens``."""
    limit = max(_MIN_CUT_CHARS, needed_tokens * _CHARS_PER_TOKEN_BOUND)
    if len(text) <= limit:
        return text
    match = _CUT_AFTER.search(text, limit)
    return text if match is None else text[: match.end()]


def _pack(rows: list[list[int]], pad_id: int, truncated: Sequence[bool]) -> TokenStream:
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int32, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    ids = np.fromiter(chain.from_iterable(rows), dtype=np.int32, count=total)
    flags = np.fromiter(truncated, dtype=bool, count=len(rows))
    return TokenStream(ids=ids, offsets=offsets, lengths=lengths, pad_id=pad_id, truncated=flags)


@dataclass
class EncodeResult:
    """Streams for one batch of documents plus bookkeeping for the stats."""

    streams: dict[StreamKey, TokenStream]
    fallback_docs: int
    verified_docs: int
    seconds: float


class SharedTokenizer:
    """Builds every requested :class:`StreamKey`'s ids from one encoding of texts and urls
    (one caller at a time per instance; never touches torch)."""

    def __init__(self, infos: Sequence[TokenizerInfo], *, verify_docs: int = 4) -> None:
        self.infos = {info.hash: info for info in infos}
        self.verify_docs = verify_docs
        self._lock = threading.Lock()

    def encode(
        self, texts: Sequence[str], urls: Sequence[str], keys: Sequence[StreamKey]
    ) -> EncodeResult:
        """Return the ids for each key, in input order, verified against a sample."""
        if len(texts) != len(urls):
            raise ValueError(f"{len(texts)} texts but {len(urls)} urls")
        started = time.perf_counter()
        texts = [t if isinstance(t, str) else "" for t in texts]
        urls = [u if isinstance(u, str) else "" for u in urls]
        with self._lock:
            streams: dict[StreamKey, TokenStream] = {}
            fallback = verified = 0
            by_hash: dict[str, list[StreamKey]] = {}
            for key in dict.fromkeys(keys):
                by_hash.setdefault(key.tokenizer_hash, []).append(key)
            for tok_hash, tok_keys in by_hash.items():
                info = self.infos[tok_hash]
                part, more_fallback, more_verified = self._encode_one(info, texts, urls, tok_keys)
                streams.update(part)
                fallback, verified = fallback + more_fallback, verified + more_verified
        return EncodeResult(streams, fallback, verified, time.perf_counter() - started)

    def _encode_one(
        self, info: TokenizerInfo, texts: list[str], urls: list[str], keys: list[StreamKey]
    ) -> tuple[dict[StreamKey, TokenStream], int, int]:
        if info.splittable:
            streams = self._assemble(info, texts, urls, keys)
            mismatched = self._verify(info, texts, urls, streams)
            if not mismatched:
                return streams, 0, min(self.verify_docs, len(texts)) * len(keys)
            info.splittable = False
            info.reason = f"assembled ids differ from the tokenizer's own output ({mismatched})"
        out: dict[StreamKey, TokenStream] = {}
        for key in keys:
            strings = [format_input(key.input, t, u) for t, u in zip(texts, urls, strict=True)]
            rows, truncated = info.encode_reference_truncated(strings, key.max_length)
            out[key] = _pack(rows, info.pad_id, truncated)
        fallback = len(texts) * sum(1 for key in keys if key.input == "url_text")
        return out, fallback, 0

    def _assemble(
        self, info: TokenizerInfo, texts: list[str], urls: list[str], keys: list[StreamKey]
    ) -> dict[StreamKey, TokenStream]:
        specials = len(info.prefix_ids) + len(info.suffix_ids)
        needed = max(key.max_length for key in keys) - specials
        text_ids, beyond = _encode_texts(info, texts, needed)
        url_ids: list[list[int]] = []
        if any(key.input == "url_text" for key in keys):
            unique = list(dict.fromkeys(urls))
            encoded = info.backend.encode_batch_fast(unique, add_special_tokens=False)
            lookup = {u: e.ids for u, e in zip(unique, encoded, strict=True)}
            url_ids = [lookup[u] for u in urls]
        out: dict[StreamKey, TokenStream] = {}
        for key in keys:
            rows, truncated = _rows(info, key, text_ids, url_ids, beyond)
            out[key] = _pack(rows, info.pad_id, truncated)
        return out

    def _verify(
        self,
        info: TokenizerInfo,
        texts: list[str],
        urls: list[str],
        streams: dict[StreamKey, TokenStream],
    ) -> str:
        """Compare a sample (first and longest documents) with the tokenizer's own output."""
        if not texts or self.verify_docs <= 0:
            return ""
        # Giant documents are never in the sample: the reference encodes them whole (a 5 MB
        # text took 4 s and 0.6 GB), which is what the pre-cut exists to avoid.
        candidates = [i for i in range(len(texts)) if len(texts[i]) <= _VERIFY_MAX_CHARS]
        n_first = min(len(candidates), max(1, self.verify_docs // 2))
        n_long = self.verify_docs - n_first
        # the longest documents exercise truncation and the pre-cut
        longest = heapq.nlargest(n_long, candidates, key=lambda i: len(texts[i]))
        sample = sorted({*candidates[:n_first], *longest})
        if not sample:
            return ""
        for key, stream in streams.items():
            strings = [format_input(key.input, texts[i], urls[i]) for i in sample]
            expected = info.encode_reference(strings, key.max_length)
            for i, ids in zip(sample, expected, strict=True):
                if stream.doc(i) != ids:
                    return f"document {i}, input {key.input}"
        return ""
