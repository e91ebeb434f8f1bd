"""The packed forward's work around attention, as two functions per layer that
``torch.compile`` can fuse (``inference.compile``; the choice is ``classify/compiling.py``).

Run eagerly, each layer is a chain of small kernels over every token: the rotary
embedding of q and k (five), residual + LayerNorm twice, activation x up. About 0.96 MB
of elementwise traffic per token on a GTE-base in half precision (docs/engine.md), as
much as the GEMMs' own reads at these sizes. vLLM's ``GteNew`` and TEI's FlashGTE fuse
them; here Inductor does, from the same code the eager path runs: :func:`qkv_rope` (the
q/k/v GEMM, then the rotary embedding as one pass) and :func:`layer_tail` (o-proj,
residual + LayerNorm, gate/up GEMM, activation x up as one pass, down-proj, residual +
LayerNorm). Every argument is a tensor, a number or a module-level function, so one
compiled graph serves every layer of every model of the job (no recompilation per
layer). Only the token count is dynamic (dimension 0 of the inputs that have one,
marked at each call); the hidden and head sizes stay static, so Inductor keeps its
single-pass reductions (LayerNorm) and batches of any size reuse the one graph.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


#: The activations with a functional form that is exactly transformers' module's (by
#: ``config.hidden_act``); another runs its module eagerly and is never compiled.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": _gelu,
    "gelu_pytorch_tanh": _gelu_tanh,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
}


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def qkv_rope(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k (rotated) and v, each ``(tokens, heads, head_dim)``, of ``hidden``
    ``(tokens, hidden)``; ``cos``/``sin`` are ``(tokens, 1, head_dim)``."""
    tokens, head_dim = hidden.shape[0], cos.shape[-1]
    qkv = F.linear(hidden, weight, bias).view(tokens, 3, -1, head_dim)
    query, key, value = qkv.unbind(1)
    query = query * cos + _rotate_half(query) * sin
    key = key * cos + _rotate_half(key) * sin
    return query, key, value.contiguous()  # v: a view into the GEMM's output otherwise


@dataclass(frozen=True)
class LayerWeights:
    """One layer's tensors after attention, and its LayerNorms' epsilons."""

    o_weight: torch.Tensor
    o_bias: torch.Tensor | None
    norm1: tuple[torch.Tensor, torch.Tensor | None, float]
    gate_up: torch.Tensor
    down_weight: torch.Tensor
    down_bias: torch.Tensor | None
    norm2: tuple[torch.Tensor, torch.Tensor | None, float]


def layer_tail(
    hidden: torch.Tensor,
    attended: torch.Tensor,
    weights: LayerWeights,
    act: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """The layer's output from its input ``hidden`` and its attention's ``attended``
    ``(tokens, hidden)``: post-norm residuals around o-proj and the gated MLP."""
    w = weights
    out = F.linear(attended, w.o_weight, w.o_bias)
    hidden = F.layer_norm(hidden + out, (hidden.shape[-1],), w.norm1[0], w.norm1[1], w.norm1[2])
    gate, up = F.linear(hidden, w.gate_up).chunk(2, dim=-1)
    out = F.linear(act(gate) * up, w.down_weight, w.down_bias)
    return F.layer_norm(hidden + out, (hidden.shape[-1],), w.norm2[0], w.norm2[1], w.norm2[2])


@dataclass(frozen=True)
class Kernels:
    """The two functions a packed layer calls: eager, or compiled by Inductor."""

    qkv_rope: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    layer_tail: Callable[..., torch.Tensor]
    compiled: bool = False


EAGER = Kernels(qkv_rope, layer_tail)


def compiled() -> Kernels:
    """Both functions compiled (lazily: the first call traces and compiles), one whole
    graph each (an unsupported operation raises instead of running half eager), static
    but for the token count (:func:`_tokens_dynamic`)."""
    options = {"fullgraph": True, "dynamic": False}
    qkv = _marked(torch.compile(qkv_rope, **options), (0, 3, 4))  # hidden, cos, sin
    tail = _marked(torch.compile(layer_tail, **options), (0, 1))  # hidden, attended
    return Kernels(qkv, tail, compiled=True)


def _marked(fn: Callable[..., Any], positions: tuple[int, ...]) -> Callable[..., Any]:
    """``fn`` with the token dimension of its arguments at ``positions`` marked dynamic
    at each call (:func:`_tokens_dynamic`)."""

    def call(*args: Any) -> Any:
        _tokens_dynamic(*(args[i] for i in positions))
        return fn(*args)

    return call


def _tokens_dynamic(*tensors: torch.Tensor) -> None:
    """Mark the token dimension (0) dynamic: one graph for every batch size. A batch of
    one token (never a real document: [CLS] and [SEP] are two) is left static, since
    Dynamo refuses a dynamic dimension of size 1."""
    for tensor in tensors:
        if tensor.shape[0] > 1:
            torch._dynamo.mark_dynamic(tensor, 0)
