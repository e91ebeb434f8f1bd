"""Which forward a job runs (``inference.attention``), and the packed path's self-check.

``auto`` runs packed batches (``classify/packed.py``) where they pay: on CUDA, in half
precision, with every classifier a native GTE, where torch has ``varlen_attn`` (2.10+) and
the GPU the flash kernel (capability 8.0+); elsewhere padded, the reason in the stats.
``packed`` runs them anywhere (the CPU's reference attention is slow). A kernel bug
would label silently, so once per job, before any packed batch, one small batch of the
job's own documents (one of them long) goes through both forwards: the labels must agree
(but for near ties, which half precision cannot decide anyway) and the probabilities stay
within :data:`TOLERANCE`. A failure or an exception means padded
batches for the rest of the job, said in one console line and recorded for this kind of
GPU (``run/budgets.py``): later jobs go padded without repeating it (docs/engine.md).
"""

from dataclasses import dataclass

import numpy as np

from shardwise.classify.calibration import spread
from shardwise.classify.tokenization import TokenStream

MODES = ("auto", "padded", "packed")
#: Largest probability difference the self-check accepts between the two forwards: half
#: precision's own error on these models is of this size (docs/engine.md).
TOLERANCE = 0.02
#: The self-check's batch: this many documents spread over the lengths, cut to this length,
#: and the job's longest document up to :data:`CHECK_LONG_TOKENS` (positions past 512 are
#: where a rope or a tile bug would show).
CHECK_DOCS = 8
CHECK_TOKENS = 512
CHECK_LONG_TOKENS = 4096
#: The varlen flash kernel's least compute capability (FlashAttention-2: Ampere).
FLASH_CAPABILITY = (8, 0)
#: Where FlashAttention-3 runs (Hopper), when its ``flash_attn_interface`` imports.
FA3_CAPABILITY = (9, 0)


@dataclass(frozen=True)
class DeviceFacts:
    """What decides the forward on a device: CUDA or not, half precision, the compute
    capability (None off CUDA), whether torch has ``varlen_attn`` (2.10+), and the
    padded verdict an earlier job recorded for this kind of GPU (``run/budgets.py``)."""

    cuda: bool
    half: bool
    capability: tuple[int, int] | None = None
    varlen: bool = True
    torch_version: str = ""
    decided_before: str | None = None
    fa3: bool = False  # FlashAttention-3's ``flash_attn_interface`` imports (installed)


@dataclass(frozen=True)
class Choice:
    """The forward a job runs: ``packed`` (confirmed by the self-check before its first
    batch) or ``padded``, and why (the stats say it); ``flash``: the flash implementation
    packed batches ask torch for (``FA3`` on Hopper with it installed, else torch's own)."""

    mode: str
    reason: str
    flash: str = ""


def choose(setting: str, device: DeviceFacts, unsupported: list[str]) -> Choice:
    """The forward for ``inference.attention`` = ``setting`` on ``device``; ``unsupported``:
    the classifiers that are not a native GTE (ValueError with ``packed``). ``auto`` is
    packed only where the varlen flash kernel runs (CUDA, half precision, torch with
    ``varlen_attn``, capability 8.0+) and no earlier job of this kind of GPU found
    otherwise; everywhere else padded, the reason said."""
    if setting not in MODES:
        raise ValueError(f"inference.attention {setting!r}: expected one of {list(MODES)}")
    if setting == "padded":
        return Choice("padded", "inference.attention: padded")
    if unsupported:
        names = ", ".join(unsupported)
        if setting == "packed":
            msg = f"inference.attention packed: classifier(s) {names} are not GTE models "
            raise ValueError(msg + "(packed batches need one); use auto or padded")
        return Choice("padded", f"auto: {names} not GTE")
    if setting == "packed":
        if _fa3(device):
            return Choice("packed", "inference.attention: packed, FlashAttention-3", flash="FA3")
        return Choice("packed", "inference.attention: packed")
    return _auto(device)


def _fa3(device: DeviceFacts) -> bool:
    """FlashAttention-3 runs the varlen calls here: Hopper, half precision, torch's
    ``varlen_attn``, and ``flash_attn_interface`` installed."""
    return device.fa3 and device.half and device.varlen and device.capability == FA3_CAPABILITY


def _auto(device: DeviceFacts) -> Choice:
    """``auto``'s verdict (:func:`choose`): padded with its reason, or packed (with
    FlashAttention-3 on Hopper where it is installed)."""
    why = _why_padded(device)
    if why is not None:
        return Choice("padded", f"auto: {why}")
    if _fa3(device):
        why = "auto: CUDA in half precision, FlashAttention-3 (capability 9.0, installed)"
        return Choice("packed", why, flash="FA3")
    return Choice("packed", "auto: CUDA in half precision")


def _why_padded(device: DeviceFacts) -> str | None:
    """Why packed batches would not pay on ``device`` (None: they would)."""
    if not device.cuda:
        return "not on CUDA"
    if not device.half:
        return "float32 (the varlen kernel needs half precision)"
    if not device.varlen:
        why = f"torch {device.torch_version} has no torch.nn.attention.varlen (2.10+), "
        return why + "so packed batches would run the slow reference attention"
    if device.capability is not None and device.capability < FLASH_CAPABILITY:
        major, minor = device.capability
        why = f"compute capability {major}.{minor}: the varlen flash kernel needs "
        return why + f"{FLASH_CAPABILITY[0]}.{FLASH_CAPABILITY[1]} (Ampere+)"
    return device.decided_before


def sample(stream: TokenStream) -> TokenStream:
    """The self-check's documents: the longest of ``stream`` cut to
    :data:`CHECK_LONG_TOKENS`, then up to :data:`CHECK_DOCS` spread from the longest to
    the shortest, each cut to :data:`CHECK_TOKENS`, longest first."""
    order = np.argsort(-stream.lengths, kind="stable")
    picks = order[spread(len(order), CHECK_DOCS)]
    cuts = [(int(i), CHECK_TOKENS) for i in picks]
    if len(order) and int(stream.lengths[order[0]]) > CHECK_TOKENS:
        cuts.insert(0, (int(order[0]), CHECK_LONG_TOKENS))
    # each piece within its own document (a shorter one is whole, never its neighbours')
    ends = [min(cut, int(stream.lengths[i])) for i, cut in cuts]
    pieces = [
        stream.ids[stream.offsets[i] : stream.offsets[i] + n]
        for (i, _), n in zip(cuts, ends, strict=True)
    ]
    lengths = np.array([len(p) for p in pieces], dtype=np.int32)
    offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate(pieces) if pieces else np.zeros(0, stream.ids.dtype)
    return TokenStream(ids=ids, offsets=offsets, lengths=lengths, pad_id=stream.pad_id)


@dataclass(frozen=True)
class SelfCheck:
    """What the self-check found for one classifier (or the error that stopped it)."""

    classifier: str
    docs: int = 0
    max_prob_diff: float = 0.0
    label_diffs: int = 0  # labels that differ outside near ties
    error: str = ""
    #: Where the error is the node's, not the forward's (a compiled forward that could
    #: not be built here: ``compiling.environment_fault``): its cause and fix.
    environment: str = ""

    @property
    def passed(self) -> bool:
        """Whether packed batches may label this job's documents."""
        return not self.error and self.label_diffs == 0 and self.max_prob_diff <= TOLERANCE

    def line(self) -> str:
        """Why it failed, in a few words (the console line names the classifier too)."""
        if self.error:
            return f"the packed forward raised {self.error}"
        return (
            f"{self.label_diffs} label(s) differ, probabilities by up to "
            f"{self.max_prob_diff:.4f} (tolerance {TOLERANCE}) on {self.docs} document(s)"
        )

    def to_json(self) -> dict[str, object]:
        """The stats' ``attention_self_check`` entry."""
        return {
            "classifier": self.classifier,
            "docs": self.docs,
            "max_prob_diff": round(self.max_prob_diff, 6),
            "label_diffs": self.label_diffs,
            "passed": self.passed,
            "error": self.error or None,
        }


def compare(classifier: str, padded: np.ndarray, packed: np.ndarray) -> SelfCheck:
    """Compare both forwards' logits of the same documents: probabilities, and labels
    wherever the padded forward's top two are more than ``2 x TOLERANCE`` apart."""
    finite = np.isfinite(padded).all(axis=1)  # a row half precision overflowed: the re-check's
    if not np.isfinite(packed[finite]).all():
        return SelfCheck(classifier, len(padded), error="non-finite logits")
    p, q = _softmax(padded[finite]), _softmax(packed[finite])
    diff = float(np.abs(p - q).max()) if p.size else 0.0
    top2 = np.sort(p, axis=1)[:, -2:] if p.shape[1] > 1 else np.ones((len(p), 2))
    clear = (top2[:, 1] - top2[:, 0]) > 2 * TOLERANCE
    differ = int(((p.argmax(1) != q.argmax(1)) & clear).sum())
    return SelfCheck(classifier, len(padded), diff, differ)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)
