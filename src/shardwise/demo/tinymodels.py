"""Offline builders for tiny but real WebOrganizer-like classifiers (deterministic per seed).

The demo, the tests and the benchmarks never reach the hub, yet take exactly the real
checkpoints' path: a BERT-uncased WordPiece tokenizer, a GTE encoder with a classification
head, ``id2label``, and (``new_format``) Alibaba's "new" layout, which the loader
(:mod:`shardwise.classify.models`) must rewrite before transformers loads it natively.
"""

import json
import shutil
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)
from transformers import BertTokenizerFast, GteConfig, GteForSequenceClassification

from shardwise.config import weborganizer_labels

#: BERT order, so ``[PAD]`` is id 0 as in the real WebOrganizer tokenizer (``pad_token_id: 0``).
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

#: Files of a saved tokenizer that are copied next to each model.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "vocab.txt")  # fmt: skip

#: What the real checkpoints' ``auto_map`` points to; the code is deliberately not shipped.
_NEW_IMPL = "Alibaba-NLP/new-impl--"
_NEW_AUTO_MAP = {
    "AutoConfig": f"{_NEW_IMPL}configuration.NewConfig",
    "AutoModel": f"{_NEW_IMPL}modeling.NewModel",
    "AutoModelForSequenceClassification": f"{_NEW_IMPL}modeling.NewForSequenceClassification",
}

#: The rope of the real gte-base-en-v1.5 checkpoints (fixed NTK scaling).
_NEW_ROPE_THETA = 500000.0
_NEW_NTK_FACTOR = 2.0


def build_wordpiece_tokenizer(
    texts: Iterable[str], out_dir: Path, vocab_size: int = 4000
) -> BertTokenizerFast:
    """A WordPiece tokenizer with ``bert-base-uncased``'s pipeline (WebOrganizer's) for
    ``texts``, saved into ``out_dir``; printable ASCII is in the alphabet (no URL is all
    ``[UNK]``). The vocabulary is built here, not by ``tokenizers``' trainer, whose ties
    fall in hash order: the same texts give the same ids on every build and machine, so
    the demo's models, and its figures, are the same everywhere."""
    out_dir = Path(out_dir)
    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    vocab = _wordpiece_vocab(texts, normalizer, pre_tokenizer, vocab_size)
    tok = Tokenizer(
        models.WordPiece(vocab=vocab, unk_token=SPECIAL_TOKENS[1], max_input_chars_per_word=100)
    )
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    specials = [("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))]
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=specials
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    roles = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
    specials_by_role = dict(zip(roles, SPECIAL_TOKENS, strict=True))
    fast = BertTokenizerFast(tokenizer_object=tok, model_max_length=8192, **specials_by_role)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))
    return fast


def _wordpiece_vocab(
    texts: Iterable[str],
    normalizer: normalizers.Normalizer,
    pre_tokenizer: pre_tokenizers.PreTokenizer,
    vocab_size: int,
) -> dict[str, int]:
    """The special tokens, every character (alone and as a ``##`` continuation), then the
    commonest words, ties in word order, up to ``vocab_size``: greedy WordPiece spells any
    other word from its characters."""
    counts: Counter[str] = Counter()
    for text in texts:
        words = pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
        counts.update(word for word, _ in words)
    printable = set(string.printable.lower()) - set(string.whitespace)
    chars = sorted(printable | {c for word in counts for c in word})
    base = [*SPECIAL_TOKENS, *chars, *(f"##{c}" for c in chars)]
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    words = [word for word, _ in ranked if len(word) > 1]
    tokens = base + words[: max(0, vocab_size - len(base))]
    return {token: i for i, token in enumerate(tokens)}


def native_to_new_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a native ``GteForSequenceClassification`` state dict to Alibaba "new" names, by
    hand (not transformers' reverse conversion), so the loader test checks the forward one
    against an independent description: ``new.`` prefix, ``encoder.layer.N``, packed
    ``attention.qkv_proj`` (q, k, v), ``attn_ln``/``mlp_ln``, ``mlp.up_gate_proj`` (up, gate)."""
    out: dict[str, torch.Tensor] = {}
    layers: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        if key.startswith("gte.layers."):
            rest = key[len("gte.layers.") :]
            index, name = rest.split(".", 1)
            layers.setdefault(int(index), {})[name] = value
        elif key.startswith("gte."):
            out["new." + key[len("gte.") :]] = value
        else:
            out[key] = value
    for index, parts in sorted(layers.items()):
        prefix = f"new.encoder.layer.{index}."
        for kind in ("weight", "bias"):
            qkv = [parts[f"self_attn.{p}_proj.{kind}"] for p in ("q", "k", "v")]
            out[prefix + f"attention.qkv_proj.{kind}"] = torch.cat(qkv, dim=0)
            out[prefix + f"attention.o_proj.{kind}"] = parts[f"self_attn.o_proj.{kind}"]
            out[prefix + f"attn_ln.{kind}"] = parts[f"post_attention_layernorm.{kind}"]
            out[prefix + f"mlp_ln.{kind}"] = parts[f"post_mlp_layernorm.{kind}"]
        up_gate = [parts["mlp.up_proj.weight"], parts["mlp.gate_proj.weight"]]
        out[prefix + "mlp.up_gate_proj.weight"] = torch.cat(up_gate, dim=0)
        out[prefix + "mlp.down_proj.weight"] = parts["mlp.down_proj.weight"]
        out[prefix + "mlp.down_proj.bias"] = parts["mlp.down_proj.bias"]
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def _new_style_config(config: GteConfig, labels: Sequence[str]) -> dict[str, Any]:
    """A config.json shaped like the real WebOrganizer (gte-base-en-v1.5) checkpoints."""
    same = (
        "hidden_act",
        "hidden_size",
        "initializer_range",
        "intermediate_size",
        "layer_norm_eps",
        "max_position_embeddings",
        "num_attention_heads",
        "num_hidden_layers",
        "pad_token_id",
        "vocab_size",
    )
    return {
        **{key: getattr(config, key) for key in same},
        "architectures": ["NewForSequenceClassification"],
        "attention_probs_dropout_prob": 0.0,
        "auto_map": dict(_NEW_AUTO_MAP),
        "classifier_dropout": None,
        "hidden_dropout_prob": 0.1,
        "id2label": {str(i): label for i, label in enumerate(labels)},
        "label2id": {label: i for i, label in enumerate(labels)},
        "layer_norm_type": "layer_norm",
        "logn_attention_clip1": False,
        "logn_attention_scale": False,
        "model_type": "new",
        "pack_qkv": True,
        "position_embedding_type": "rope",
        "rope_scaling": {"factor": _NEW_NTK_FACTOR, "type": "ntk"},
        "rope_theta": _NEW_ROPE_THETA,
        "torch_dtype": "float32",
        "transformers_version": "4.39.1",
        "type_vocab_size": 0,
        "unpad_inputs": False,
        "use_memory_efficient_attention": False,
    }


def build_tiny_gte_classifier(  # noqa: PLR0913 - a test model's shape knobs, keyword-only
    out_dir: Path,
    labels: Sequence[str],
    tokenizer_dir: Path,
    *,
    seed: int = 0,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 2,
    max_position_embeddings: int = 8192,
    new_format: bool = False,
    initializer_range: float = 0.3,
) -> Path:
    """A seeded random GTE sequence classifier that loads like a hub repo: native ``gte``, or
    (``new_format``) the real checkpoints' layout (``model_type: "new"``, NTK rope, Alibaba
    names), with the equivalent linear rope, so both give the same logits once loaded.
    ``initializer_range`` 0.3 gives varied, well-separated labels (a plausible demo); at large
    shapes such weights are chaotic, so precision benchmarks pass a trained model's 0.02."""
    if not labels:
        raise ValueError("labels must not be empty")
    out_dir = Path(out_dir)
    tokenizer_dir = Path(tokenizer_dir)
    with (tokenizer_dir / "tokenizer.json").open(encoding="utf-8") as handle:
        tokenizer_json = json.load(handle)
    vocab_size = len(tokenizer_json["model"]["vocab"])
    pad_id = tokenizer_json["model"]["vocab"].get("[PAD]", 0)
    head_dim = hidden_size // num_heads
    rope = {
        "rope_type": "linear",
        "rope_theta": _NEW_ROPE_THETA * _NEW_NTK_FACTOR,
        "factor": _NEW_NTK_FACTOR ** (2 / head_dim),
    }
    config = GteConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        intermediate_size=hidden_size * 4,
        max_position_embeddings=max_position_embeddings,
        type_vocab_size=0,
        pad_token_id=pad_id,
        initializer_range=initializer_range,
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
        rope_parameters=rope,
    )
    config.architectures = ["GteForSequenceClassification"]
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = GteForSequenceClassification(config).eval()
    finally:
        torch.random.set_rng_state(generator_state)

    out_dir.mkdir(parents=True, exist_ok=True)
    if new_format:
        state = native_to_new_state_dict(model.state_dict())
        save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
        text = json.dumps(_new_style_config(config, labels), indent=2, sort_keys=True)
        (out_dir / "config.json").write_text(text + "\n", encoding="utf-8")
    else:
        model.save_pretrained(str(out_dir))
    for name in _TOKENIZER_FILES:
        source = tokenizer_dir / name
        if source.is_file():
            shutil.copyfile(source, out_dir / name)
    return out_dir


def build_weborganizer_demo_models(
    models_dir: Path, texts: Iterable[str], *, seed: int = 0
) -> dict[str, Path]:
    """Build the four demo classifiers in the "new" format (the real checkpoints' rewrite),
    with one shared tokenizer trained on ``texts`` (as the real four share one) and a seed each."""
    models_dir = Path(models_dir)
    label_sets = weborganizer_labels()
    tokenizer_dir = models_dir / ".tokenizer"
    build_wordpiece_tokenizer(texts, tokenizer_dir)
    out: dict[str, Path] = {}
    for offset, name in enumerate(("topic", "topic_nourl", "format", "format_nourl")):
        labels = label_sets[name.removesuffix("_nourl")]
        seeded = seed * 100 + offset
        out[name] = build_tiny_gte_classifier(
            models_dir / name, labels, tokenizer_dir, seed=seeded, new_format=True
        )
    # Each model directory carries its own copy of the tokenizer files, like the hub repos.
    shutil.rmtree(tokenizer_dir)
    return out
