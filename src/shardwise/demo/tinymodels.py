"""Offline builders for tiny but real WebOrganizer-like classifiers.

The demo, the end-to-end tests and the benchmark must never reach the Hugging Face hub, yet they
should exercise exactly the code path the real checkpoints take: a BERT-uncased WordPiece
tokenizer, a GTE encoder with a sequence-classification head, labels from ``id2label`` and (with
``new_format=True``) a checkpoint laid out like Alibaba's custom "new" code, which the loader in
:mod:`shardwise.classify.models` must rewrite before transformers can load it natively.

Everything here is deterministic for a given seed so tests can compare runs.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import string
from collections.abc import Iterable, Sequence
from importlib import resources
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
    trainers,
)
from transformers import BertTokenizerFast, GteConfig, GteForSequenceClassification

__all__ = [
    "SPECIAL_TOKENS",
    "build_tiny_gte_classifier",
    "build_weborganizer_demo_models",
    "build_wordpiece_tokenizer",
    "native_to_new_state_dict",
    "synthetic_corpus",
    "weborganizer_labels",
]

#: BERT order, so ``[PAD]`` is id 0 as in the real WebOrganizer tokenizer (``pad_token_id: 0``).
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

#: Files of a saved tokenizer that are copied next to each model.
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)

#: What the real checkpoints' ``auto_map`` points to; the code is deliberately not shipped.
_NEW_AUTO_MAP = {
    "AutoConfig": "Alibaba-NLP/new-impl--configuration.NewConfig",
    "AutoModel": "Alibaba-NLP/new-impl--modeling.NewModel",
    "AutoModelForSequenceClassification": (
        "Alibaba-NLP/new-impl--modeling.NewForSequenceClassification"
    ),
}

#: The rope of the real gte-base-en-v1.5 checkpoints (fixed NTK scaling).
_NEW_ROPE_THETA = 500000.0
_NEW_NTK_FACTOR = 2.0


_SYLLABLES = (
    "al", "be", "ca", "do", "er", "fi", "go", "ha", "in", "jo", "ka", "lu", "me", "no", "or",
    "pa", "qu", "ri", "st", "th", "un", "ve", "wi", "xe", "yo", "ze", "an", "en", "on", "ing",
)  # fmt: skip


def synthetic_corpus(
    n: int,
    *,
    seed: int = 0,
    median_words: float = 200.0,
    sigma: float = 1.0,
    max_words: int = 12000,
    tail_fraction: float = 0.01,
) -> tuple[list[str], list[str]]:
    """Return ``(texts, urls)`` of ``n`` synthetic web documents with lognormal lengths.

    Lengths (in words) are lognormal around ``median_words``; a ``tail_fraction`` of documents is
    pushed to ``max_words`` so a benchmark also sees documents past the truncation length, as in
    real crawls. Words are pseudo-words with some punctuation, digits and capitals, enough for a
    WordPiece tokenizer to produce realistic sub-word splits. Some urls are empty, some texts too.
    """
    rng = random.Random(seed)  # reproducible test data, not security
    vocab = [
        "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))
        for _ in range(3000)
    ]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]  # Zipf-like frequencies
    texts: list[str] = []
    urls: list[str] = []
    for index in range(n):
        if rng.random() < tail_fraction:
            length = max_words
        else:
            length = min(max_words, max(1, int(median_words * math.exp(rng.gauss(0.0, sigma)))))
        words = rng.choices(vocab, weights=weights, k=length)
        for position in range(0, length, 17):
            words[position] = words[position].capitalize()
        for position in range(11, length, 13):
            words[position] += rng.choice((".", ",", "!", "?", ";", ":", ". \n"))
        text = " ".join(words) if index % 97 else ""
        texts.append(text)
        host = rng.choice(vocab) + rng.choice((".com", ".org", ".net", ".de"))
        path = "/".join(rng.choice(vocab) for _ in range(rng.randint(0, 4)))
        urls.append("" if index % 23 == 0 else f"https://www.{host}/{path}")
    return texts, urls


def weborganizer_labels() -> dict[str, list[str]]:
    """Return the ``topic`` and ``format`` label lists shipped in the package data."""
    text = (
        resources.files("shardwise")
        .joinpath("data/weborganizer-labels.json")
        .read_text(encoding="utf-8")
    )
    data = json.loads(text)
    return {"topic": list(data["topic"]), "format": list(data["format"])}


def build_wordpiece_tokenizer(
    texts: Iterable[str], out_dir: Path, vocab_size: int = 4000
) -> BertTokenizerFast:
    """Train a BERT-uncased-style WordPiece tokenizer on ``texts`` and save it to ``out_dir``.

    Same pipeline as ``bert-base-uncased`` (the WebOrganizer tokenizer): BertNormalizer with
    lowercasing, BertPreTokenizer, ``[CLS] $A [SEP]`` template. Printable ASCII is seeded into the
    alphabet so URLs and punctuation do not collapse to ``[UNK]``.
    """
    out_dir = Path(out_dir)
    tok = Tokenizer(models.WordPiece(unk_token=SPECIAL_TOKENS[1], max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=sorted(set(string.printable.lower()) - set(string.whitespace)),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    cls_id = tok.token_to_id("[CLS]")
    sep_id = tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    roles = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
    fast = BertTokenizerFast(
        tokenizer_object=tok,
        model_max_length=8192,
        **dict(zip(roles, SPECIAL_TOKENS, strict=True)),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))
    return fast


def native_to_new_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a native ``GteForSequenceClassification`` state dict to Alibaba "new" names.

    Written out by hand (not via transformers' reverse conversion) so the loader test checks the
    forward conversion against an independent description of the "new" layout:
    ``new.`` prefix, ``encoder.layer.N``, packed ``attention.qkv_proj`` (q, k, v along dim 0),
    ``attn_ln``/``mlp_ln`` and packed ``mlp.up_gate_proj`` (up first, then gate, as the custom
    code splits it).
    """
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
            out[prefix + f"attention.qkv_proj.{kind}"] = torch.cat(
                [parts[f"self_attn.{p}_proj.{kind}"] for p in ("q", "k", "v")], dim=0
            )
            out[prefix + f"attention.o_proj.{kind}"] = parts[f"self_attn.o_proj.{kind}"]
            out[prefix + f"attn_ln.{kind}"] = parts[f"post_attention_layernorm.{kind}"]
            out[prefix + f"mlp_ln.{kind}"] = parts[f"post_mlp_layernorm.{kind}"]
        out[prefix + "mlp.up_gate_proj.weight"] = torch.cat(
            [parts["mlp.up_proj.weight"], parts["mlp.gate_proj.weight"]], dim=0
        )
        out[prefix + "mlp.down_proj.weight"] = parts["mlp.down_proj.weight"]
        out[prefix + "mlp.down_proj.bias"] = parts["mlp.down_proj.bias"]
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def _new_style_config(config: GteConfig, labels: Sequence[str]) -> dict[str, Any]:
    """A config.json shaped like the real WebOrganizer (gte-base-en-v1.5) checkpoints."""
    return {
        "architectures": ["NewForSequenceClassification"],
        "attention_probs_dropout_prob": 0.0,
        "auto_map": dict(_NEW_AUTO_MAP),
        "classifier_dropout": None,
        "hidden_act": config.hidden_act,
        "hidden_dropout_prob": 0.1,
        "hidden_size": config.hidden_size,
        "id2label": {str(i): label for i, label in enumerate(labels)},
        "initializer_range": config.initializer_range,
        "intermediate_size": config.intermediate_size,
        "label2id": {label: i for i, label in enumerate(labels)},
        "layer_norm_eps": config.layer_norm_eps,
        "layer_norm_type": "layer_norm",
        "logn_attention_clip1": False,
        "logn_attention_scale": False,
        "max_position_embeddings": config.max_position_embeddings,
        "model_type": "new",
        "num_attention_heads": config.num_attention_heads,
        "num_hidden_layers": config.num_hidden_layers,
        "pack_qkv": True,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "rope",
        "rope_scaling": {"factor": _NEW_NTK_FACTOR, "type": "ntk"},
        "rope_theta": _NEW_ROPE_THETA,
        "torch_dtype": "float32",
        "transformers_version": "4.39.1",
        "type_vocab_size": 0,
        "unpad_inputs": False,
        "use_memory_efficient_attention": False,
        "vocab_size": config.vocab_size,
    }


def build_tiny_gte_classifier(
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
    """Build a randomly initialised (seeded) GTE sequence classifier that loads like a hub repo.

    ``new_format=False`` writes a native ``gte`` checkpoint. ``new_format=True`` writes what the
    real WebOrganizer checkpoints look like (``model_type: "new"``, ``auto_map``, NTK rope,
    Alibaba weight names). The native weights are initialised with the linear rope that is
    equivalent to that NTK rope, so both formats give the same logits once loaded.

    ``initializer_range`` is the weight std. The default 0.3 is wider than a trained model's
    so random models give varied, well-separated labels (the demo looks plausible and
    order-restore tests compare distinct answers); at large shapes such weights are chaotic
    (tiny input noise changes most labels), so benchmarks that measure precision pass the
    realistic 0.02 (the transformers default, and the scale of trained checkpoints).
    """
    if not labels:
        raise ValueError("labels must not be empty")
    out_dir = Path(out_dir)
    tokenizer_dir = Path(tokenizer_dir)
    with (tokenizer_dir / "tokenizer.json").open(encoding="utf-8") as handle:
        tokenizer_json = json.load(handle)
    vocab_size = len(tokenizer_json["model"]["vocab"])
    pad_id = tokenizer_json["model"]["vocab"].get("[PAD]", 0)
    head_dim = hidden_size // num_heads
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
        rope_parameters={
            "rope_type": "linear",
            "rope_theta": _NEW_ROPE_THETA * _NEW_NTK_FACTOR,
            "factor": _NEW_NTK_FACTOR ** (2 / head_dim),
        },
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
        new_config = _new_style_config(config, labels)
        (out_dir / "config.json").write_text(
            json.dumps(new_config, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
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
    """Build the four demo classifiers (``topic``, ``topic_nourl``, ``format``, ``format_nourl``).

    One tokenizer is trained on ``texts`` and shared (as the real four share bert-base-uncased);
    each model gets its own seed so their outputs differ. They are written in the "new" format so
    the demo runs through the same config rewrite as the real checkpoints.
    """
    models_dir = Path(models_dir)
    label_sets = weborganizer_labels()
    tokenizer_dir = models_dir / ".tokenizer"
    build_wordpiece_tokenizer(texts, tokenizer_dir)
    plan = (
        ("topic", "topic"),
        ("topic_nourl", "topic"),
        ("format", "format"),
        ("format_nourl", "format"),
    )
    out: dict[str, Path] = {}
    for offset, (name, label_key) in enumerate(plan):
        out[name] = build_tiny_gte_classifier(
            models_dir / name,
            label_sets[label_key],
            tokenizer_dir,
            seed=seed * 100 + offset,
            new_format=True,
        )
    # Each model directory carries its own copy of the tokenizer files, like the hub repos.
    shutil.rmtree(tokenizer_dir)
    return out
