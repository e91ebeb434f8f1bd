"""The CUDA batch budget: what it depends on (``run/budgets.py``'s key) and the probe that
finds it, once per kind of GPU and set-up (later jobs read the first one's record)."""

import time
from typing import Any

import torch

from shardwise.classify.batching import CannotShrinkError
from shardwise.classify.device import SdpaRecorder, key_mask, probe_rows
from shardwise.errors import ModelError
from shardwise.run import budgets

#: Upper bound of the CUDA probe: beyond this a bigger batch does not run faster.
CUDA_MAX_BATCH_TOKENS = 1 << 19
#: Fraction of free GPU memory the first probe candidate is sized for.
_PROBE_MEMORY_FRACTION = 0.6


def budget_key(engine: Any) -> budgets.BudgetKey:
    """What the probe's answer depends on: the GPU, the dtype, torch, the longest input
    and every model copy on the GPU (they take the memory the batches do not get)."""
    props = torch.cuda.get_device_properties(engine.device)
    copies = {c.spec.model: c.loaded.num_parameters for c in engine._classifiers}
    fp32 = [loaded.num_parameters for loaded in engine._fp32.values()]
    return budgets.BudgetKey(
        gpu=str(props.name),
        memory=int(props.total_memory),
        dtype=engine.dtype_name,
        torch=str(torch.__version__),
        max_length=max(c.key.max_length for c in engine._classifiers),
        models=tuple(sorted([*copies.values(), *fp32])),
    )


def timed_probe(engine: Any) -> tuple[int, str, float]:
    """:func:`probe_budget` with masked batches, and its seconds."""
    started = time.perf_counter()
    tokens, kernel = probe_budget(engine, masked=True)
    return tokens, kernel, time.perf_counter() - started


def probe_budget(engine: Any, *, masked: bool = True) -> tuple[int, str]:
    """Largest padded-token budget (a multiple of the longest length) that fits, by trial,
    and the attention kernel the trial used. With ``masked`` the trials carry a key mask
    as padded batches do: a mask rules out flash attention, and the math kernel's scores
    need far more memory than a flash probe would measure."""
    length = max(c.key.max_length for c in engine._classifiers)
    biggest = max(engine._classifiers, key=lambda c: c.loaded.num_parameters)
    config = biggest.loaded.model.config
    hidden = int(getattr(config, "hidden_size", 768))
    inner = int(getattr(config, "intermediate_size", 4 * hidden))
    per_token = torch.tensor([], dtype=engine.dtype).element_size() * (8 * hidden + 3 * inner)
    free, _total = torch.cuda.mem_get_info(engine.device)
    candidate = min(CUDA_MAX_BATCH_TOKENS, int(free * _PROBE_MEMORY_FRACTION / per_token))
    vocab = int(getattr(config, "vocab_size", 1000))
    kernels: list[str] = []

    def attempt(rows: int) -> None:
        ids = torch.randint(5, max(6, vocab), (rows, length), device=engine.device)
        real = torch.ones((rows, length), dtype=torch.bool, device=engine.device)
        mask = key_mask(real, engine.dtype) if masked else None
        recorder = SdpaRecorder()
        with torch.inference_mode(), recorder:
            engine._forward(biggest.loaded.model, biggest.key_mask_4d, ids, mask)
        torch.cuda.synchronize(engine.device)
        kernels[:] = recorder.kernels[:1]

    try:
        rows = probe_rows(attempt, max(1, candidate // length), torch.cuda.empty_cache)
    except CannotShrinkError as exc:
        msg = f"model {biggest.spec.model!r}: one document of {length} tokens does not fit "
        raise ModelError(f"{msg}in GPU memory ({exc})") from None
    return rows * length, (kernels[0] if kernels else "none")
