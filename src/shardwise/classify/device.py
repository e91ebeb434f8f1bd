"""The device and dtype a job runs on, and what torch does there (attention kernels, OOM).

``auto`` means CUDA when torch can use it, and never a silent CPU fallback for a job
that was given GPUs; bf16 on compute capability >= 8.0, fp16 below, fp32 on the CPU.
Also the small torch helpers the engine's budget probe and stats use: the largest row
count that fits (:func:`probe_rows`) and the attention kernel a call dispatches to.
"""

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from shardwise.classify.batching import CannotShrinkError
from shardwise.classify.tokenization import TokenStream
from shardwise.errors import ModelError

#: Environment variables through which a scheduler or a container runtime hands a job its
#: GPUs (``NVIDIA_VISIBLE_DEVICES``: the NVIDIA container runtime, Kubernetes' device plugin).
GPU_ENV_VARS = (
    "CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "NVIDIA_VISIBLE_DEVICES",
)  # fmt: skip
#: Values of those variables that mean "no GPU".
_NO_GPU_VALUES = {"", "none", "nodevfiles", "void", "n/a"}

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}  # fmt: skip


def _names_gpus(value: str) -> bool:
    """True when a device-list variable's value names at least one GPU (not "", -1, NoDevFiles)."""
    entries = [v.strip() for v in value.split(",")]
    return any(v.lower() not in _NO_GPU_VALUES and not v.startswith("-") for v in entries)


def gpus_assigned(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The GPU variables (:data:`GPU_ENV_VARS`) that say this process was given GPUs."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in GPU_ENV_VARS if k in env and env[k].strip() and _names_gpus(env[k])}


def _no_cuda_reason() -> str:
    """Why torch cannot use CUDA here, naming ``torch.version.cuda``."""
    built = torch.version.cuda
    if built is None:
        text = f"torch {torch.__version__} is a CPU-only build (torch.version.cuda=None); install "
        text += "a CUDA build of torch in the job's environment (docs/engine.md: 'A CUDA build of "
        return text + "torch')"
    text = f"torch {torch.__version__} was built for CUDA {built} (torch.version.cuda={built!r}) "
    text += "but finds no usable GPU: the node's driver may be older than that CUDA version or the "
    return text + "device is not visible to the job (run nvidia-smi in a job on that node)"


def select_device(
    requested: str = "auto", environ: Mapping[str, str] | None = None
) -> torch.device:
    """Resolve ``auto|cpu|cuda|cuda:N``. ``auto`` is the CPU only when the job was given no
    GPU: a GPU job quietly on the CPU runs 50x slower, so that fails, naming the fix."""
    value = (requested or "auto").strip().lower()
    if value == "auto":
        if torch.cuda.is_available():
            value = "cuda"
        else:
            assigned = gpus_assigned(environ)
            if assigned:
                given = ", ".join(f"{k}={v}" for k, v in assigned.items())
                text = f"inference device 'auto': this job was given GPU(s) ({given}) but "
                text += f"{_no_cuda_reason()}; or set inference.device: cpu to run on the CPU on "
                raise ModelError(text + "purpose")
            return torch.device("cpu")
    if value == "cpu":
        return torch.device("cpu")
    if value.startswith("cuda"):
        if not torch.cuda.is_available():
            msg = f"inference device {requested!r}: CUDA is not available here: {_no_cuda_reason()}"
            raise ModelError(msg)
        if value == "cuda":
            return torch.device("cuda", torch.cuda.current_device())
        try:
            index = int(value.split(":", 1)[1])
        except (IndexError, ValueError) as exc:
            raise ModelError(f"inference device {requested!r}: expected cuda:N") from exc
        count = torch.cuda.device_count()
        if not 0 <= index < count:
            raise ModelError(f"inference device {requested!r}: only {count} CUDA device(s) visible")
        return torch.device("cuda", index)
    raise ModelError(f"inference device {requested!r}: expected auto, cpu, cuda or cuda:N")


def select_dtype(
    requested: str, device_type: str, capability: tuple[int, int] | None = None
) -> torch.dtype:
    """The compute dtype: explicit wins; ``auto``: bf16 on compute capability >= 8.0, fp16
    below, fp32 on CPU. Explicit bf16 below 8.0 is refused (no bf16 tensor cores there)."""
    value = (requested or "auto").strip().lower()
    if value != "auto":
        if value not in _DTYPES:
            msg = f"inference dtype {requested!r}: expected auto, float32, bfloat16 or float16"
            raise ModelError(msg)
        dtype = _DTYPES[value]
        old_gpu = device_type == "cuda" and capability is not None and tuple(capability) < (8, 0)
        if dtype is torch.bfloat16 and old_gpu:
            major, minor = capability
            text = f"inference dtype {requested!r} on a GPU of compute capability {major}.{minor}: "
            text += "bfloat16 needs 8.0 or newer (no bf16 tensor cores below, GEMMs would be "
            text += "emulated); use dtype auto (float16 there) or float32"
            raise ModelError(text)
        return dtype
    if device_type != "cuda":
        return torch.float32
    if capability is None:
        raise ModelError("inference dtype 'auto' on CUDA needs the device's compute capability")
    return torch.bfloat16 if tuple(capability) >= (8, 0) else torch.float16


#: Largest relative error of a float32 matmul still called float32 (TF32 gives ~1e-3).
FP32_TOLERANCE = 1e-5
_TF32_OVERRIDE = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"


def strict_fp32(device: torch.device, environ: Mapping[str, str] | None = None) -> str:
    """Make float32 mean float32 for the re-check and the calibration: TF32 off for matmuls
    and convolutions, then checked once on ``device`` (a 256 x 256 matmul against float64).
    Returns "" when it holds, else what is wrong and why, for the job's console line."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    error = fp32_matmul_error(device)
    if error <= FP32_TOLERANCE:
        return ""
    env = os.environ if environ is None else environ
    text = f"float32 matmuls on {device} are not float32 (relative error {error:.1e}, "
    text += f"float32 gives under {FP32_TOLERANCE:.0e}): the fp32 re-check and calibration "
    text += "run at reduced precision, so labels may depend on the GPU"
    if env.get(_TF32_OVERRIDE, "0") not in ("", "0"):
        text += f"; {_TF32_OVERRIDE}={env[_TF32_OVERRIDE]} turns TF32 on: unset it in the job"
    return text


def fp32_matmul_error(device: torch.device, matmul: Callable | None = None) -> float:
    """The largest relative error of a float32 ``matmul`` (default ``torch.matmul``) of two
    random 256 x 256 matrices on ``device``, against float64 on the host."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(256, 256, generator=generator) for _ in range(2))
    exact = a.double() @ b.double()
    got = (matmul or torch.matmul)(a.to(device), b.to(device)).double().cpu()
    return float((got - exact).abs().max() / exact.abs().max())


def probe_rows(
    attempt: Callable[[int], None], rows: int, cleanup: Callable[[], None] | None = None
) -> int:
    """Largest row count <= ``rows`` (halving) for which ``attempt(rows)`` does not OOM
    (:class:`CannotShrinkError` when one row does); ``cleanup`` runs after each OOM, outside
    the except block, so the failed attempt's tensors are released."""
    rows = max(1, rows)
    while True:
        try:
            attempt(rows)
            return rows
        except torch.OutOfMemoryError as exc:
            message = str(exc) or "out of memory"
        if cleanup is not None:  # outside the except block: the traceback is gone
            cleanup()
        if rows == 1:
            raise CannotShrinkError(message)
        rows //= 2


def dtype_name(dtype: torch.dtype) -> str:
    """``bfloat16``, ``float32``: how stats and logs name a dtype."""
    return str(dtype).removeprefix("torch.")


_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")


def _sdpa_backend(*args: Any, **kwargs: Any) -> str:
    """The kernel torch's dispatcher picks for these sdpa arguments (flash, efficient, math...)."""
    choose = getattr(torch, "_fused_sdp_choice", None)  # what F.sdpa itself consults
    if choose is None:
        return "unknown"
    params = dict(zip(_SDPA_ARGS, args, strict=False)) | kwargs
    try:
        index = choose(
            params["query"],
            params["key"],
            params["value"],
            params.get("attn_mask"),
            params.get("dropout_p", 0.0),
            params.get("is_causal", False),
            scale=params.get("scale"),
            enable_gqa=params.get("enable_gqa", False),
        )
        return torch.nn.attention.SDPBackend(index).name.lower()
    except (KeyError, RuntimeError, TypeError, ValueError):
        return "unknown"


class SdpaRecorder(TorchFunctionMode):
    """Records which attention kernel each ``scaled_dot_product_attention`` call dispatches to."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            self.kernels.append(_sdpa_backend(*args, **kwargs))
        return func(*args, **kwargs)


def key_mask(real: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive key-padding mask of shape (rows, 1, 1, width) in ``dtype``: transformers
    expands a 2D mask to (rows, 1, width, width) on every forward, which cost more than the
    attention itself on CPU (2.3x slower on 8 x 2048 batches). Same logits either way."""
    mask = torch.zeros(real.shape, dtype=dtype, device=real.device)
    mask.masked_fill_(~real, torch.finfo(dtype).min)
    return mask[:, None, None, :]


def collate(
    stream: TokenStream, rows: np.ndarray, width: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Documents ``rows`` of ``stream`` as one padded batch on ``device``: ids and key mask
    (None when no row is padded); on CUDA pinned and copied without waiting."""
    starts = stream.offsets[rows]
    lengths = stream.lengths[rows].astype(np.int64)
    positions = np.arange(width, dtype=np.int64)
    real = positions[None, :] < lengths[:, None]
    gather = np.minimum(starts[:, None] + positions[None, :], max(0, len(stream.ids) - 1))
    ids = np.where(real, stream.ids[gather], stream.pad_id).astype(np.int64)
    ids_t = torch.from_numpy(ids)
    real_t = None if bool(real.all()) else torch.from_numpy(real)
    if device.type == "cuda":
        ids_t = ids_t.pin_memory().to(device, non_blocking=True)
        if real_t is not None:
            real_t = real_t.pin_memory().to(device, non_blocking=True)
    return ids_t, (None if real_t is None else key_mask(real_t, dtype))
