"""Load sequence classifiers faithfully, including Alibaba "new"-format GTE checkpoints.

The WebOrganizer checkpoints say ``model_type: "new"`` and point at custom code that no
longer runs; transformers 5 loads them as its native GTE given a rewritten
``config.json``, written into a cache directory of its own (the other files symlinked:
the user's files, maybe a read-only hub cache, are never edited; no remote code runs).
"""

import contextlib
import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    GteForSequenceClassification,
)

from shardwise.classify.modelcheck import HUB_ID, default_cache_root, hub_parts
from shardwise.classify.tokenization import backend_hash
from shardwise.errors import ModelError

#: Keys only the Alibaba custom code reads; dropped (after checking their values) on rewrite.
_NEW_ONLY_KEYS = (
    "auto_map", "rope_scaling", "rope_theta", "layer_norm_type", "logn_attention_scale",
    "logn_attention_clip1", "pack_qkv", "unpad_inputs", "use_memory_efficient_attention",
    "position_embedding_type",
)  # fmt: skip

#: Values of "new"-only options that the native GTE implements; anything else is refused,
#: because loading would silently compute something different from the original model.
_NEW_SUPPORTED = {
    "layer_norm_type": ("layer_norm",), "logn_attention_scale": (False,),
    "logn_attention_clip1": (False,), "pack_qkv": (True,), "position_embedding_type": ("rope",),
}  # fmt: skip

_HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model"]


@dataclass(frozen=True, kw_only=True)
class LoadedClassifier:
    """A classifier ready for inference, with what the engine needs to feed and label it."""

    model: torch.nn.Module
    tokenizer: Any  # a transformers fast tokenizer (has ``backend_tokenizer``)
    labels: tuple[str, ...]  # index = logit position, from config.id2label
    tokenizer_hash: str  # content hash; equal hashes -> identical tokenization
    source_dir: Path  # the user's (or hub snapshot's) directory
    load_dir: Path  # the directory transformers actually loaded (cache dir if rewritten)
    rewritten: bool  # True when a "new"-format config was rewritten to native gte
    max_positions: int | None  # config.max_position_embeddings, if any
    num_parameters: int
    num_embedding_parameters: int


def resolve_model_dir(model: str) -> Path:
    """A local directory for ``model``: the directory itself, or a hub snapshot (which
    honours ``HF_HOME`` and ``HF_HUB_OFFLINE``: nodes usually read a pre-filled cache)."""
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(f"model {model!r}: is a file, expected a model directory")
        if not (path / "config.json").is_file():
            raise ModelError(f"model {model!r}: directory has no config.json")
        return path.resolve()
    if not HUB_ID.match(model):
        raise ModelError(f"model {model!r}: no such directory and not a hub id (owner/name)")
    repo, revision = hub_parts(model)
    try:
        snapshot = snapshot_download(repo_id=repo, revision=revision, allow_patterns=_HUB_PATTERNS)
        if not any(Path(snapshot).glob("*.safetensors")):  # old repos ship only .bin weights
            patterns = [*_HUB_PATTERNS, "*.bin"]
            snapshot = snapshot_download(repo_id=repo, revision=revision, allow_patterns=patterns)
    except Exception as exc:  # hub errors are many; all mean 'cannot get it'
        raise ModelError(f"model {model!r}: cannot fetch from the hub: {exc}") from exc
    path = Path(snapshot)
    if not (path / "config.json").is_file():
        raise ModelError(f"model {model!r}: hub snapshot has no config.json")
    return path


def rewrite_new_config(config: dict[str, Any], model: str = "<config>") -> dict[str, Any]:
    """Rewrite an Alibaba "new"-format config dict into a native ``gte`` one (pure function).

    Fixed NTK rope scaling (base ``theta * s``, inverse frequencies divided by ``s**(2/d)``) is
    exactly transformers' linear rope with ``rope_theta = theta * s`` and ``factor = s**(2/d)``,
    where ``d`` is the head dimension. ``rope_scaling`` must go: left in, transformers fails
    with ``KeyError: 'ntk'``.
    """
    out = dict(config)
    for key, allowed in _NEW_SUPPORTED.items():
        if key in out and out[key] not in allowed:
            msg = f"model {model!r}: {key}={out[key]!r} is not supported by the native GTE "
            raise ModelError(msg + f"(supported: {list(allowed)})")
    try:
        hidden = int(out["hidden_size"])
        heads = int(out["num_attention_heads"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"model {model!r}: config lacks hidden_size/num_attention_heads") from exc
    head_dim = int(out.get("head_dim") or hidden // heads)
    theta = float(out.get("rope_theta", 10000.0))
    scaling = out.get("rope_scaling")
    if scaling is None:
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": theta}
    else:
        kind = scaling.get("type", scaling.get("rope_type"))
        if kind != "ntk" or scaling.get("mixed_b") is not None:
            msg = f"model {model!r}: rope_scaling {scaling!r} is not supported "
            raise ModelError(msg + "(only fixed NTK scaling, type 'ntk' without mixed_b)")
        factor = float(scaling["factor"])
        rope = {
            "rope_type": "linear",
            "rope_theta": theta * factor,
            "factor": factor ** (2.0 / head_dim),
        }
    for key in _NEW_ONLY_KEYS:
        out.pop(key, None)
    out["model_type"] = "gte"
    out["architectures"] = ["GteForSequenceClassification"]
    out["rope_parameters"] = rope
    return out


def _is_new_format(config: dict[str, Any]) -> bool:
    return config.get("model_type") == "new"


def _read_config(source: Path, model: str) -> dict[str, Any]:
    try:
        with (source / "config.json").open(encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"model {model!r}: cannot read config.json: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelError(f"model {model!r}: config.json is not a JSON object")
    return data


def prepare_load_dir(
    source: Path, model: str = "<model>", cache_root: Path | None = None
) -> tuple[Path, bool]:
    """``(directory to load, rewritten?)`` for the checkpoint in ``source``: a "new"-format
    one gets a cache directory (the rewritten ``config.json``, symlinks to the rest), built
    under a temporary name and renamed into place, so concurrent jobs build or reuse it whole."""
    source = Path(source)
    config = _read_config(source, model)
    if not _is_new_format(config):
        return source, False
    if "ForSequenceClassification" not in " ".join(config.get("architectures") or []):
        msg = f"model {model!r}: 'new'-format checkpoint is not a sequence classifier "
        raise ModelError(msg + f"(architectures={config.get('architectures')!r})")
    rewritten = rewrite_new_config(config, model)
    text = json.dumps(rewritten, indent=2, sort_keys=True) + "\n"
    key = hashlib.sha256(f"{source.resolve()}\n{text}".encode()).hexdigest()[:16]
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    readable = re.sub(r"[^\w.-]+", "--", model).strip("-.")[-60:] or source.name
    target = root / f"{readable}-{key}"
    if source.resolve() == target.resolve() or target.resolve().is_relative_to(source.resolve()):
        raise ModelError(f"model {model!r}: cache directory {target} would be inside the model")
    if _cache_dir_ok(target, source):
        return target, True
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
        for entry in sorted(source.iterdir()):
            if entry.name == "config.json" or entry.name.startswith("."):
                continue
            (tmp / entry.name).symlink_to(entry.resolve())
        (tmp / "config.json").write_text(text, encoding="utf-8")
        (tmp / "shardwise-source.txt").write_text(f"{source.resolve()}\n", encoding="utf-8")
        if target.exists() and not _cache_dir_ok(target, source):
            shutil.rmtree(target, ignore_errors=True)
        try:
            tmp.rename(target)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # another job won the race
    except OSError as exc:
        msg = f"model {model!r}: cannot write rewritten config under {root}: {exc}"
        raise ModelError(msg) from exc
    if not _cache_dir_ok(target, source):
        raise ModelError(f"model {model!r}: rewritten checkpoint at {target} is incomplete")
    return target, True


def _cache_dir_ok(target: Path, source: Path) -> bool:
    """A cache dir is reusable when its config exists and every source file is linked."""
    return (target / "config.json").is_file() and all(
        (target / entry.name).exists()
        for entry in source.iterdir()
        if entry.name != "config.json" and not entry.name.startswith(".")
    )


def tokenizer_hash(tokenizer: Any) -> str:
    """Content hash of what a fast tokenizer does (``tokenization.backend_hash``)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ModelError("tokenizer is not a fast (tokenizers-backed) tokenizer")
    return backend_hash(backend)


def _labels(model_obj: torch.nn.Module, model: str) -> tuple[str, ...]:
    config = model_obj.config
    id2label = getattr(config, "id2label", None) or {}
    try:
        ordered = sorted((int(k), str(v)) for k, v in id2label.items())
    except (TypeError, ValueError) as exc:
        raise ModelError(f"model {model!r}: id2label has non-integer keys") from exc
    if [i for i, _ in ordered] != list(range(len(ordered))):
        raise ModelError(f"model {model!r}: id2label keys are not 0..n-1: {id2label!r}")
    num_labels = getattr(config, "num_labels", len(ordered))
    if len(ordered) != num_labels or not ordered:
        msg = f"model {model!r}: id2label has {len(ordered)} labels but num_labels={num_labels}"
        raise ModelError(msg)
    return tuple(label for _, label in ordered)


def _check_loading_info(info: dict[str, Any], model: str) -> None:
    """Refuse checkpoints whose weights did not all land: transformers would init them randomly."""
    ignorable = re.compile(r"(position_ids|inv_freq|rotary_emb)")
    missing = [k for k in info.get("missing_keys", []) if not ignorable.search(k)]
    mismatched = list(info.get("mismatched_keys", []))
    if missing or mismatched:
        raise ModelError(
            f"model {model!r}: weights missing from the checkpoint: {sorted(missing)[:8]}"
            + (f"; shape mismatches: {mismatched[:4]}" if mismatched else "")
        )
    unexpected = [k for k in info.get("unexpected_keys", []) if not ignorable.search(k)]
    if unexpected:
        unused = sorted(unexpected)[:8]
        raise ModelError(f"model {model!r}: checkpoint weights the model does not use: {unused}")


def _own_memory(model_obj: torch.nn.Module) -> None:
    """Copy the weights out of the checkpoint's memory map: on the CPU they may still be
    the file's pages, so a file written in place would change the model mid-job (a GPU
    copy is the device's own). Once per load; the model's size in host memory."""
    with torch.no_grad():
        for tensor in (*model_obj.parameters(), *model_obj.buffers()):
            tensor.data = tensor.data.clone()


def load_classifier(
    model: str,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    attn_implementation: str = "sdpa",
    cache_root: Path | None = None,
) -> LoadedClassifier:
    """Load ``model`` (hub id or local directory) and its tokenizer for inference ("new"-format
    GTE through a rewritten config); every failure is a :class:`ModelError` naming the model."""
    source = resolve_model_dir(model)
    load_dir, rewritten = prepare_load_dir(source, model, cache_root)
    config = _read_config(load_dir, model)
    gte = config.get("model_type") == "gte"
    model_cls: Any = GteForSequenceClassification if gte else AutoModelForSequenceClassification
    kwargs: dict[str, Any] = {"dtype": dtype, "output_loading_info": True}
    try:
        try:
            model_obj, info = model_cls.from_pretrained(
                str(load_dir), attn_implementation=attn_implementation, **kwargs
            )
        except ValueError as exc:
            if "attn" not in str(exc).lower() and "sdpa" not in str(exc).lower():
                raise
            model_obj, info = model_cls.from_pretrained(str(load_dir), **kwargs)
    except ModelError:
        raise
    except Exception as exc:  # transformers raises many types
        raise ModelError(f"model {model!r}: cannot load weights from {load_dir}: {exc}") from exc
    _check_loading_info(info, model)
    labels = _labels(model_obj, model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(load_dir))
    except Exception as exc:
        raise ModelError(f"model {model!r}: cannot load tokenizer: {exc}") from exc
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise ModelError(f"model {model!r}: tokenizer is not a fast (tokenizers) tokenizer")
    try:
        model_obj = model_obj.to(device).eval()
    except (RuntimeError, ValueError) as exc:
        raise ModelError(f"model {model!r}: cannot move to {device}: {exc}") from exc
    if torch.device(device).type == "cpu":
        _own_memory(model_obj)
    embedding_params = 0
    with contextlib.suppress(AttributeError, NotImplementedError):
        embedding_params = sum(p.numel() for p in model_obj.get_input_embeddings().parameters())
    return LoadedClassifier(
        model=model_obj,
        tokenizer=tokenizer,
        labels=labels,
        tokenizer_hash=tokenizer_hash(tokenizer),
        source_dir=source,
        load_dir=load_dir,
        rewritten=rewritten,
        max_positions=getattr(model_obj.config, "max_position_embeddings", None),
        num_parameters=sum(p.numel() for p in model_obj.parameters()),
        num_embedding_parameters=embedding_params,
    )
