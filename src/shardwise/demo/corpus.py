"""The built-in demo: a small corpus in every input format, four tiny offline classifiers
(random weights, WebOrganizer's label sets: the labels mean nothing) and the config that
runs them, to exercise the real code path end to end, offline."""

import gzip
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
import zstandard

from shardwise.store.atomic import write_atomic

#: (source, category, topic words) of the demo corpus.
CATEGORIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("cc", "science", ("atom", "cell", "energy", "galaxy", "experiment", "theory", "data")),
    ("cc", "sports", ("match", "team", "goal", "season", "coach", "league", "score")),
    ("cc", "cooking", ("recipe", "oven", "flour", "garlic", "simmer", "butter", "spice")),
    ("wiki", "history", ("empire", "war", "treaty", "king", "century", "revolution", "archive")),
    ("wiki", "technology", ("software", "chip", "network", "protocol", "compiler", "server")),
    ("forum", "games", ("level", "boss", "quest", "patch", "console", "speedrun", "guild")),
)
_COMMON_TEXT = "the of and to in a is that for it as was with be by on not he this are or his "
_COMMON_TEXT += "from at which but have an they you were her she there been one all we their "
_COMMON_TEXT += "has would when if so no will about up out more what said who can its other "
_COMMON_TEXT += "into time some could them "
COMMON = tuple(_COMMON_TEXT.split())
#: Extensions cycled through per category, so every reader path runs.
EXTENSIONS = (".parquet", ".jsonl.gz", ".parquet", ".jsonl.zst", ".jsonl")
#: Dolma's names (``shardwise demo --dolma``): JSON Lines under ``.json.gz`` / ``.json.zst``.
DOLMA_EXTENSIONS = (".json.gz", ".json.zst")

CLASSIFIERS = (("topic", "url_text"), ("topic_nourl", "text"), ("format", "url_text"),
               ("format_nourl", "text"))  # fmt: skip


@dataclass(frozen=True)
class DemoSize:
    """How big a demo to write (tests use smaller ones)."""

    files_per_category: int = 5
    docs_per_file: int = 40
    median_words: int = 120
    max_words: int = 2500


def _text(rng: random.Random, topic: tuple[str, ...], size: DemoSize) -> str:
    n = min(size.max_words, max(3, int(size.median_words * math.exp(rng.gauss(0, 1.0)))))
    words = [rng.choice(topic) if rng.random() < 0.2 else rng.choice(COMMON) for _ in range(n)]
    return " ".join(" ".join(words[i : i + 12]).capitalize() + "." for i in range(0, n, 12))


def _records(
    source: str, category: str, part: int, size: DemoSize, seed: int, *, dolma: bool = False
) -> list[dict]:
    rng = random.Random(f"{seed}/{source}/{category}/{part}")
    topic = next(t for s, c, t in CATEGORIES if (s, c) == (source, category))
    out = []
    for i in range(size.docs_per_file):
        doc_id = f"{source}-{category}-{part:04d}-{i:05d}"
        text, url = _text(rng, topic, size), f"https://{source}.example.org/{category}/{part}/{i}"
        if dolma:  # Dolma's fields: the url under metadata
            out.append(
                {
                    "id": doc_id,
                    "text": text,
                    "source": source,
                    "added": "2026-01-01",
                    "metadata": {"url": url},
                }
            )
        else:
            out.append({"id": doc_id, "text": text, "url": url})
    return out


def _encode(records: list[dict], ext: str) -> bytes:
    if ext == ".parquet":
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist(records), sink)
        return sink.getvalue().to_pybytes()
    lines = "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")
    if ext.endswith(".gz"):
        return gzip.compress(lines, mtime=0)
    if ext.endswith(".zst"):
        return zstandard.ZstdCompressor().compress(lines)
    return lines


def write_corpus(
    root: Path, size: DemoSize | None = None, seed: int = 0, *, dolma: bool = False
) -> list[Path]:
    """Write the demo corpus under ``root``; returns the files written. ``dolma``: in
    Dolma's layout and names (``.json.gz`` / ``.json.zst``, ``metadata.url``)."""
    size = size or DemoSize()
    extensions = DOLMA_EXTENSIONS if dolma else EXTENSIONS
    written = []
    for c_index, (source, category, _) in enumerate(CATEGORIES):
        for part in range(size.files_per_category):
            ext = extensions[(part + c_index) % len(extensions)]
            path = root / source / category / f"part-{part:04d}{ext}"
            records = _records(source, category, part, size, seed, dolma=dolma)
            write_atomic(path, _encode(records, ext))
            written.append(path)
    return written


def demo_config(
    directory: Path, total_shards: int = 8, *, dolma: bool = False, tokenizer: Path | None = None
) -> dict:
    """A config that runs the demo in ``directory`` (absolute paths); ``dolma``: the
    corpus in Dolma's layout, labelled into Dolma attributes too; ``tokenizer``: the
    training tokenizer whose tokens each document is counted in (``domains.tokenizer``)."""
    directory = directory.absolute()
    if dolma:
        source = {"uri": str(directory / "dolma" / "documents"), "url_field": "metadata.url"}
        output = {"uri": str(directory / "labels"), "dolma": {"enabled": True}}
    else:
        source, output = {"uri": str(directory / "corpus")}, {"uri": str(directory / "labels")}
    classifiers = [
        {"name": name, "model": str(directory / "models" / name), "input": kind}
        for name, kind in CLASSIFIERS
    ]
    return {
        "run_dir": str(directory / "run"),
        "input": source,
        "output": output,
        "sharding": {"total_shards": total_shards, "minimum_shard_index": 0},
        "classifiers": classifiers,
        "inference": {"max_length": 512, "batch_tokens": 8192, "device": "auto"},
        **({"domains": {"tokenizer": str(tokenizer.absolute())}} if tokenizer else {}),
    }


def write_site_config(
    directory: Path,
    site: str,
    *,
    bucket: str,
    storage: dict,
    models: Path,
    total_shards: int,
    lease_seconds: float,
) -> Path:
    """One site of a demo campaign (``campaign.site``), written to
    ``directory/config-<site>.yaml``: its own run directory under ``directory``, the
    corpus and labels in the shared ``bucket`` (``corpus/``, ``labels/``), the demo models
    in ``models``, on the CPU at a short length, so that two sites on one machine finish
    in seconds."""
    cfg = demo_config(directory, total_shards=total_shards)
    cfg["run_dir"] = str(directory.absolute() / f"run-{site}")
    cfg["input"] = {"uri": f"s3://{bucket}/corpus"}
    cfg["output"] = {"uri": f"s3://{bucket}/labels"}
    cfg["storage"] = storage
    for c in cfg["classifiers"]:
        c["model"] = str(models.absolute() / c["name"])
    cfg["inference"].update({"max_length": 128, "device": "cpu"})
    cfg["resources"] = {"classify": {"runtime": 5}}
    cfg["campaign"] = {"site": site, "lease_seconds": lease_seconds}
    path = directory / f"config-{site}.yaml"
    path.write_text(yaml.safe_dump(cfg), "utf-8")
    return path


def write_demo(
    directory: Path, size: DemoSize | None = None, seed: int = 0, *, dolma: bool = False
) -> Path:
    """Corpus, models and config for the demo; returns the config path. ``dolma``: the
    corpus under ``dolma/documents`` in Dolma's layout, attributes written beside it."""
    # torch and transformers load here: `shardwise demo` alone pays for them
    from shardwise.demo.tinymodels import (  # noqa: PLC0415
        build_weborganizer_demo_models,
        build_wordpiece_tokenizer,
    )

    directory = Path(directory)
    corpus = directory / "dolma" / "documents" if dolma else directory / "corpus"
    write_corpus(corpus, size, seed, dolma=dolma)
    sample = [r["text"] for s, c, _ in CATEGORIES for r in _records(s, c, 0, DemoSize(), seed)]
    models_dir = directory / "models"
    if not all((models_dir / name / "config.json").exists() for name, _ in CLASSIFIERS):
        build_weborganizer_demo_models(models_dir, sample, seed=seed)
    # a stand-in for the tokenizer of the model being trained (GPT-NeoX's in WebOrganizer)
    tokenizer = directory / "tokenizer"
    if not (tokenizer / "tokenizer.json").exists():
        build_wordpiece_tokenizer(sample, tokenizer, vocab_size=2000)
    config = demo_config(directory, dolma=dolma, tokenizer=tokenizer)
    config_path = directory / "config.yaml"
    write_atomic(config_path, yaml.safe_dump(config, sort_keys=False).encode("utf-8"))
    return config_path
