"""The packed forward of a GTE classifier: each batch one flat token stream, no padding.

A padded batch pays for its padding and carries a dense key mask, which rules out SDPA's
flash kernel; vLLM's ``GteNew`` and TEI's FlashGTE run this architecture padding-free,
with q/k/v as one GEMM and gate/up as one. :class:`PackedGte` does the same on the model
transformers loaded (so ``tests/classify/test_models.py`` still vouches for the weights):
the projections are fused once, at load time, into one tensor each, and the model's own
``Linear`` layers are re-pointed at views of it, so the padded path (the fp32 re-check,
a fallback) shares the memory. Attention is torch's varlen flash kernel on CUDA in half
precision, else a reference attention per run of equal lengths: correct, not fast, so
the packed layout is tested on any machine. docs/engine.md has the arithmetic.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from transformers import GteForSequenceClassification

from shardwise.classify import fused
from shardwise.classify.tokenization import TokenStream

try:  # torch >= 2.10 (its first release with varlen_attn); flash kernels, CUDA only
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # an older torch: the reference attention everywhere
    varlen_attn = None

_HALF = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Packed:
    """One packed batch on the device: ``ids`` and ``positions`` per token, ``starts`` the
    cumulative sequence offsets (int32, ``rows + 1``), ``lengths`` per row on the host."""

    ids: torch.Tensor
    positions: torch.Tensor
    starts: torch.Tensor
    lengths: tuple[int, ...]

    @property
    def longest(self) -> int:
        """The longest sequence (what the varlen kernel sizes its tiles by)."""
        return max(self.lengths, default=0)


def pack(stream: TokenStream, rows: np.ndarray, device: torch.device) -> Packed:
    """Documents ``rows`` of ``stream`` as one packed batch on ``device`` (on CUDA pinned
    and copied without waiting, like a padded batch)."""
    lengths = stream.lengths[rows].astype(np.int64)
    starts = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    total = int(starts[-1])
    first = np.repeat(stream.offsets[rows] - starts[:-1], lengths)
    index = np.arange(total, dtype=np.int64)
    ids = stream.ids[first + index].astype(np.int64)
    positions = index - np.repeat(starts[:-1], lengths)
    tensors = [torch.from_numpy(ids), torch.from_numpy(positions), torch.from_numpy(starts)]
    tensors[2] = tensors[2].to(torch.int32)
    if device.type == "cuda":
        tensors = [t.pin_memory().to(device, non_blocking=True) for t in tensors]
    return Packed(*tensors, lengths=tuple(int(n) for n in lengths))


def supports(model: nn.Module) -> bool:
    """Whether :class:`PackedGte` can run ``model`` (transformers' native GTE classifier)."""
    return isinstance(model, GteForSequenceClassification)


def _fuse(linears: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for ``linears`` applied to the same input; each ``Linear`` is
    re-pointed at its slice, so nothing is held twice."""
    weight = torch.cat([lin.weight.detach() for lin in linears])
    biases = [lin.bias for lin in linears]
    bias = None if any(b is None for b in biases) else torch.cat([b.detach() for b in biases])
    row = 0
    for lin in linears:
        rows = lin.out_features
        lin.weight = nn.Parameter(weight[row : row + rows], requires_grad=False)
        if bias is not None:
            lin.bias = nn.Parameter(bias[row : row + rows], requires_grad=False)
        row += rows
    return weight, bias


class PackedGte:
    """A loaded GTE classifier run on packed batches (build once per model and job)."""

    def __init__(self, model: nn.Module) -> None:
        if not supports(model):
            raise TypeError(f"not a native GTE classifier: {type(model).__name__}")
        self.model = model
        config = model.config
        self.layers = list(model.gte.layers[: config.num_hidden_layers])
        with torch.no_grad():
            self.qkv = [
                _fuse([lay.self_attn.q_proj, lay.self_attn.k_proj, lay.self_attn.v_proj])
                for lay in self.layers
            ]
            self.gate_up = [_fuse([lay.mlp.gate_proj, lay.mlp.up_proj])[0] for lay in self.layers]
        self.tails = [
            _tail_weights(lay, gate_up)
            for lay, gate_up in zip(self.layers, self.gate_up, strict=True)
        ]
        act = fused.ACTIVATIONS.get(str(getattr(config, "hidden_act", "")))
        #: The activation as a function every layer shares (None: each layer's own module,
        #: which :mod:`~shardwise.classify.fused` cannot compile once for all layers).
        self.activation = act
        #: Eager, or compiled (``classify/compiling.py``): the self-check covers either.
        self.kernels = fused.EAGER

    @property
    def shape(self) -> str:
        """What a compiled kernel of this model depends on: hidden size, heads, MLP width,
        layers and activation (``compiling.CompileKey``)."""
        c = self.model.config
        sizes = (c.hidden_size, c.num_attention_heads, c.intermediate_size, len(self.layers))
        return "/".join(map(str, sizes)) + f"/{getattr(c, 'hidden_act', '')}"

    def attention_kernel(self, dtype: torch.dtype, device: torch.device) -> str:
        """``varlen_flash`` or ``reference`` (what :meth:`logits` runs here)."""
        flash = varlen_attn is not None and device.type == "cuda" and dtype in _HALF
        return "varlen_flash" if flash else "reference"

    def logits(self, batch: Packed) -> torch.Tensor:
        """float32 logits, one row per packed sequence."""
        gte = self.model.gte
        hidden = self._embed(batch.ids)
        cos, sin = gte.rotary_emb(hidden, batch.positions[None, :])
        cos, sin = cos[0, :, None, :], sin[0, :, None, :]  # (tokens, 1, head_dim)
        kernel = self.attention_kernel(hidden.dtype, hidden.device)
        tokens = hidden.shape[0]
        kernels = self.kernels
        for layer, (qkv_w, qkv_b), tail in zip(self.layers, self.qkv, self.tails, strict=True):
            query, key, value = kernels.qkv_rope(hidden, qkv_w, qkv_b, cos, sin)
            if kernel == "varlen_flash":
                longest = batch.longest
                out = varlen_attn(query, key, value, batch.starts, batch.starts, longest, longest)
            else:
                out = _reference_attention(query, key, value, batch.lengths)
            act = self.activation or layer.mlp.act_fn
            hidden = kernels.layer_tail(hidden, out.reshape(tokens, -1), tail, act)
        first = hidden[batch.starts[:-1].long()]
        pooled = gte.pooler.activation(gte.pooler.dense(first))
        return self.model.classifier(pooled).float()

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Word embeddings plus token type 0 (what a padded batch adds), normalised."""
        embeddings = self.model.gte.embeddings
        hidden = embeddings.word_embeddings(ids)
        if embeddings.token_type_embeddings is not None:
            hidden = hidden + embeddings.token_type_embeddings.weight[0]
        return embeddings.LayerNorm(hidden)


def _tail_weights(layer: nn.Module, gate_up: torch.Tensor) -> fused.LayerWeights:
    """``layer``'s tensors after attention, as :func:`fused.layer_tail` takes them."""
    norm1, norm2 = layer.post_attention_layernorm, layer.post_mlp_layernorm
    return fused.LayerWeights(
        o_weight=layer.self_attn.o_proj.weight,
        o_bias=layer.self_attn.o_proj.bias,
        norm1=(norm1.weight, norm1.bias, float(norm1.eps)),
        gate_up=gate_up,
        down_weight=layer.mlp.down_proj.weight,
        down_bias=layer.mlp.down_proj.bias,
        norm2=(norm2.weight, norm2.bias, float(norm2.eps)),
    )


def _reference_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, lengths: tuple[int, ...]
) -> torch.Tensor:
    """Bidirectional attention within each sequence of a packed batch, each run of equal
    lengths as one unmasked SDPA call; ``(tokens, heads, head_dim)`` in and out."""
    out = torch.empty_like(query)
    start, index = 0, 0
    while index < len(lengths):
        length, count = lengths[index], 1
        while index + count < len(lengths) and lengths[index + count] == length:
            count += 1
        end = start + count * length
        q, k, v = (
            t[start:end].view(count, length, *t.shape[1:]).transpose(1, 2)
            for t in (query, key, value)
        )
        attended = F.scaled_dot_product_attention(q, k, v)
        out[start:end] = attended.transpose(1, 2).reshape(end - start, *query.shape[1:])
        start, index = end, index + count
    return out
