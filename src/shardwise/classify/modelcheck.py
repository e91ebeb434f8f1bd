"""Check every classifier before a run pins it, and name what a file was labelled with.

A typo in a model path must not be pinned and then fail every job on the cluster: the dry
run checks each classifier first, without torch (config and labels, complete weights from
the safetensors headers, tokenizer files; a hub id in the local cache, or reachable).
:func:`identity` is what each file's stats record: a content hash and the hub revision.
"""

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from shardwise.errors import ModelError
from shardwise.run import modelpin
from shardwise.run.modelpin import ModelIdentity
from shardwise.store.atomic import write_atomic

#: A Hugging Face hub id (``owner/name``), or one at a revision (``owner/name@<commit>``).
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w.-]+)?$")
#: Tokenizer files a fast tokenizer can be built from (any one set suffices).
_TOKENIZER_SETS = (
    ("tokenizer.json",), ("vocab.txt",), ("spiece.model",), ("sentencepiece.bpe.model",),
    ("vocab.json", "merges.txt"),
)  # fmt: skip
#: Hashing reads whole weight files: in 8 MiB blocks.
_BLOCK = 8 << 20


@dataclass(frozen=True)
class ModelIssue:
    """One classifier that cannot be used, and why (the message names the fix)."""

    name: str
    model: str
    problem: str

    def line(self) -> str:
        """The line the refusal prints for this classifier."""
        return f"classifier {self.name!r} (model {self.model!r}): {self.problem}"


def check_classifiers(classifiers: Iterable[Mapping[str, str]]) -> None:
    """Raise ModelError naming every classifier whose model cannot be used."""
    issues = [issue for c in classifiers for issue in classifier_problems(c["name"], c["model"])]
    if issues:
        lines = [f"{len(issues)} classifier(s) cannot be used; nothing was pinned:"]
        lines += [f"  {issue.line()}" for issue in issues]
        text = "Fix classifiers[].model in the config (a model directory or a hub id "
        text += "owner/name) and run the dry run again."
        lines.append(text)
        raise ModelError("\n".join(lines))


def classifier_problems(name: str, model: str) -> list[ModelIssue]:
    """What is wrong with one classifier's model ([] when it looks loadable)."""
    path = Path(model).expanduser()
    if path.exists():
        return [ModelIssue(name, model, p) for p in directory_problems(path)]
    if not HUB_ID.match(model):
        why = f"no such directory ({path.absolute()}) and not a hub id (owner/name)"
        return [ModelIssue(name, model, why)]
    as_hub = f"no such directory ({path.absolute()}); as a hub id: "
    return [ModelIssue(name, model, as_hub + p) for p in _hub_problems(model)]


def directory_problems(path: Path) -> list[str]:
    """Problems of a local model directory: config and labels, weights, tokenizer."""
    if not path.is_dir():
        return [f"{path} is a file, not a model directory"]
    problems = _config_problems(path)
    problems += _weight_problems(path)
    if not any(all((path / f).is_file() for f in files) for files in _TOKENIZER_SETS):
        text = f"no tokenizer files in {path} (want tokenizer.json, or vocab.txt, "
        text += "a sentencepiece model, or vocab.json + merges.txt)"
        problems.append(text)
    elif (path / "tokenizer.json").is_file():
        problems += _tokenizer_json_problems(path / "tokenizer.json")
    return problems


def _config_problems(path: Path) -> list[str]:
    config_path = path / "config.json"
    try:
        config = json.loads(config_path.read_text("utf-8"))
    except FileNotFoundError:
        return [f"no config.json in {path}"]
    except (OSError, ValueError) as e:
        return [f"{config_path} is not readable JSON: {e}"]
    if not isinstance(config, dict):
        return [f"{config_path} is not a JSON object"]
    problems = []
    architectures = config.get("architectures") or []
    if architectures and not any("ForSequenceClassification" in a for a in architectures):
        text = f"{config_path}: architectures {architectures} hold no sequence classifier "
        text += "(a base model has no classification head: its labels would be random)"
        problems.append(text)
    id2label = config.get("id2label")
    if not isinstance(id2label, dict) or not id2label:
        problems.append(f"{config_path} has no id2label: the labels would be LABEL_0, LABEL_1, ...")
        return problems
    try:
        keys = sorted(int(k) for k in id2label)
    except (TypeError, ValueError):
        return [*problems, f"{config_path}: id2label keys are not integers: {sorted(id2label)}"]
    if keys != list(range(len(keys))):
        problems.append(f"{config_path}: id2label keys are not 0..{len(keys) - 1}: {keys}")
    num_labels = config.get("num_labels")
    if isinstance(num_labels, int) and num_labels != len(keys):
        problems.append(f"{config_path}: num_labels {num_labels} but id2label has {len(keys)}")
    return problems


def _weight_problems(path: Path) -> list[str]:
    files = sorted(path.glob("*.safetensors"))
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text("utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            return [f"{index} is not a readable safetensors index: {e}"]
        missing = sorted(s for s in shards if not (path / s).is_file())
        if missing:
            return [f"weight file(s) {missing} named by {index.name} are missing"]
    if files:
        return [p for f in files if (p := _safetensors_problem(f)) is not None]
    if any(path.glob("pytorch_model*.bin")):
        return []
    return [f"no weights in {path} (want model.safetensors or pytorch_model.bin)"]


def _safetensors_problem(path: Path) -> str | None:
    """A truncated or garbled safetensors file, from its header alone (no tensor read)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"{path} is truncated ({size} bytes)"
            length = int.from_bytes(head, "little")
            if length <= 0 or 8 + length > size:
                return f"{path} is truncated or not safetensors (header of {length} bytes)"
            header = json.loads(fh.read(length))
    except (OSError, ValueError) as e:
        return f"{path} is not a readable safetensors file: {e}"
    tensors = [v for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    ends = [int(v["data_offsets"][1]) for v in tensors if "data_offsets" in v]
    need = 8 + length + max(ends, default=0)
    if need > size:
        return f"{path} is truncated: its header needs {need:,} bytes, the file has {size:,}"
    return None


def _tokenizer_json_problems(path: Path) -> list[str]:
    try:
        Tokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises plain Exceptions
        return [f"{path} is not a loadable tokenizer: {e}"]
    return []


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_parts(model: str) -> tuple[str, str | None]:
    """A hub id's repository and revision: ``owner/name@<commit>`` names a snapshot of the
    cache whatever ``refs/main`` says; ``owner/name`` the one ``refs/main`` points to (None)."""
    repo, _, revision = model.partition("@")
    return repo, revision or None


def cached_snapshot(model: str) -> Path | None:
    """The local Hugging Face cache's snapshot of hub id ``model`` (at its revision, when
    it names one), or None."""
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - ~0.07 s
    from huggingface_hub.errors import LocalEntryNotFoundError  # noqa: PLC0415 - with hf_api

    repo, revision = hub_parts(model)
    try:
        return Path(snapshot_download(repo_id=repo, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None


def snapshot_revision(path: Path) -> str | None:
    """The hub commit of a directory laid out as the Hugging Face cache lays snapshots out
    (``.../models--owner--name/snapshots/<commit>``), however it is named: a hub id, that
    directory itself, or a link to it. None for any other directory."""
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        return path.name
    return None


def way_back(model: str, pinned: str) -> str:
    """The exact ways to label with the pinned revision ``pinned`` of hub model ``model``
    again, as they are in this cache: name the pinned snapshot (``owner/name@<commit>``,
    or its directory), or point the cache's ``refs/main`` back; ``hf download --revision``
    first when the snapshot is no longer cached (it does not move ``refs/main``)."""
    from huggingface_hub import constants  # noqa: PLC0415 - hub ids only

    repo, _ = hub_parts(model)
    folder = Path(constants.HF_HUB_CACHE) / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / pinned
    name = f"`model: {repo}@{pinned}` for this classifier"
    if snapshot.is_dir():
        text = f"the pinned snapshot is cached ({snapshot}): set {name} (or its directory), "
        return text + f"or point the cache back: `printf %s {pinned} > {folder}/refs/main`"
    text = f"fetch the pinned snapshot: `hf download {repo} --revision {pinned}` (it leaves "
    return text + f"{folder}/refs/main where it is), then set {name}"


def pin_refusal(
    name: str, model: str, diffs: list[modelpin.Difference], shown: str | None = None
) -> str:
    """``modelpin.refusal`` (naming the model as ``shown``, default ``model``), and for a
    hub model at another revision the exact way back (:func:`way_back`)."""
    text = modelpin.refusal(name, shown or model, diffs)
    pinned = next((want for key, want, _found in diffs if key == "revision"), None)
    if pinned is not None and HUB_ID.match(model) and not Path(model).expanduser().exists():
        text += f". To label with the pinned revision: {way_back(model, pinned)}"
    return text


def _hub_problems(model: str) -> list[str]:
    snapshot = cached_snapshot(model)
    if snapshot is not None:
        return directory_problems(snapshot)
    if _offline():
        text = "not in the local Hugging Face cache "
        text += f"({os.environ.get('HF_HOME', '~/.cache/huggingface')}) and HF_HUB_OFFLINE is set, "
        repo, revision = hub_parts(model)
        at = f" --revision {revision}" if revision else ""
        text += f"so it cannot be downloaded: run `hf download {repo}{at}` where there is network "
        text += "(with the same HF_HOME), or use a local model directory"
        return [text]
    try:
        from huggingface_hub import model_info  # noqa: PLC0415 - ~0.07 s, hub ids only

        info = model_info(hub_parts(model)[0], revision=hub_parts(model)[1], timeout=15)
    except Exception as e:  # noqa: BLE001 - network, auth and not-found errors alike
        text = "not in the local Hugging Face cache and the hub does not answer for it "
        text += f"({type(e).__name__}: {e}); check the id, your network/token, or download it "
        text += "first (`hf download` with the HF_HOME the jobs use)"
        return [text]
    names = {s.rfilename for s in info.siblings or ()}
    problems = []
    if "config.json" not in names:
        problems.append("the hub repository has no config.json")
    if not any(n.endswith((".safetensors", ".bin")) for n in names):
        problems.append("the hub repository has no weights (.safetensors or .bin)")
    if not any(all(f in names for f in files) for files in _TOKENIZER_SETS):
        problems.append("the hub repository has no tokenizer files")
    return problems


def default_cache_root() -> Path:
    """Where rewritten configs and model identities live: ``$SHARDWISE_MODEL_CACHE`` or
    ``~/.cache/shardwise/models``."""
    env = os.environ.get("SHARDWISE_MODEL_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "shardwise" / "models"


#: The files that make a tokenizer (whichever of them a model directory has).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt", "vocab.json", "merges.txt", "added_tokens.json",
                   "spiece.model", "sentencepiece.bpe.model")  # fmt: skip


def source_of(model: str) -> Path | None:
    """The real directory a classifier's model names, resolved once: symlinks followed (a
    ``latest`` link repointed later does not move it), a hub id's cached snapshot (the
    revision cached now); None when it is not on disk."""
    path = Path(model).expanduser()
    if path.exists():
        return path.resolve()
    if HUB_ID.match(model):
        return cached_snapshot(model)
    return None


def identity(
    model: str, *, source: Path | None = None, cache_root: Path | None = None
) -> ModelIdentity:
    """The identity (model, content_hash, tokenizer_hash, revision) of a classifier's model, for
    the stats and run.json's pin: sha256 over ``config.json`` and every weight file (name
    and bytes), and over its tokenizer files, each cached under ``cache_root`` by path,
    size, mtime, inode and ctime (paid once per model version: a file written in place,
    even with its size and mtime restored, is hashed again); the hub commit of a snapshot.
    ``source``: the directory :func:`source_of` resolved (default: resolved now)."""
    path = source if source is not None else source_of(model)
    if path is None:
        return ModelIdentity(model=model)
    revision = snapshot_revision(path)
    files = [path / "config.json"]
    files += sorted(path.glob("*.safetensors")) + sorted(path.glob("pytorch_model*.bin"))
    files = [f for f in files if f.is_file()]
    digest = _content_hash(files, cache_root) if files else None
    tokenizer = [path / n for n in TOKENIZER_FILES if (path / n).is_file()]
    tokens = _content_hash(tokenizer, cache_root) if tokenizer else None
    return ModelIdentity(digest, tokens, revision, model)


def identities(
    classifiers: Iterable[tuple[str, str, str]], sources: Mapping[str, Path | None] | None = None
) -> dict[str, ModelIdentity]:
    """Each classifier's (name, model, input) model identity (:func:`identity`), each model
    hashed once, at ``sources`` (model -> resolved directory) when given: what a file's
    stats record and run.json pins."""
    classifiers = list(classifiers)
    models = {m for _, m, _ in classifiers}
    by_model = {m: identity(m, source=sources.get(m)) if sources else identity(m) for m in models}
    return {name: by_model[model] for name, model, _ in classifiers}


def _content_hash(files: list[Path], cache_root: Path | None) -> str:
    stamp = hashlib.sha256()
    for f in files:
        st = f.stat()
        key = f"{f.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_ctime_ns}\n"
        stamp.update(key.encode())
    cached = Path(cache_root or default_cache_root()) / f"identity-{stamp.hexdigest()[:32]}.txt"
    try:
        return cached.read_text("ascii").strip()
    except OSError:
        pass
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0")
        with f.open("rb") as fh:
            while block := fh.read(_BLOCK):
                digest.update(block)
    value = digest.hexdigest()
    with contextlib.suppress(OSError):  # a read-only cache only costs the hash again next time
        write_atomic(cached, (value + "\n").encode("ascii"))
    return value
