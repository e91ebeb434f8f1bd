"""Fixtures for end-to-end runs: a small demo corpus, tiny offline models, snakemake."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from shardwise.classify.gate import AFTER_ENV, GATE_ENV, OPEN
from shardwise.demo.corpus import DemoSize, demo_config, write_corpus
from shardwise.run.fields import FieldPaths
from shardwise.run.reader import read_documents
from shardwise.store.location import Location

REPO = Path(__file__).resolve().parent.parent
SMALL = DemoSize(files_per_category=2, docs_per_file=12, median_words=60, max_words=600)


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory) -> Path:
    """The four tiny demo classifiers, built once per test session."""
    from shardwise.demo.corpus import CATEGORIES, _records
    from shardwise.demo.tinymodels import build_weborganizer_demo_models

    models = tmp_path_factory.mktemp("models")
    sample = [r["text"] for s, c, _ in CATEGORIES for r in _records(s, c, 0, SMALL, 0)]
    build_weborganizer_demo_models(models, sample)
    return models


@pytest.fixture(scope="session")
def dolma_cli() -> str:
    """The real ``dolma`` command (dolma 1.2.1 in its own venv): ``SHARDWISE_DOLMA`` names
    it (scripts/test.sh installs it in ``.venv-dolma``); without it a test that needs it is
    skipped, unless ``SHARDWISE_REQUIRE_DOLMA=1`` (CI), which makes that a failure."""
    found = os.environ.get("SHARDWISE_DOLMA") or shutil.which("dolma")
    local = REPO / ".venv-dolma" / "bin" / "dolma"
    found = found or (str(local) if local.exists() else None)
    if found is None:
        if os.environ.get("SHARDWISE_REQUIRE_DOLMA") == "1":
            pytest.fail("the dolma toolkit is required (SHARDWISE_REQUIRE_DOLMA=1): not found")
        pytest.skip("dolma is not installed (scripts/test.sh installs it in .venv-dolma)")
    return found


def make_run(
    tmp_path: Path, models: Path, *, total_shards: int = 6, size: DemoSize = SMALL, **overrides
) -> Path:
    """Write a small corpus and a config using ``models``; returns the config path."""
    write_corpus(tmp_path / "corpus", size)
    cfg = demo_config(tmp_path, total_shards=total_shards)
    for c in cfg["classifiers"]:
        c["model"] = str(models / c["name"])
    cfg["inference"].update({"max_length": 256, "device": "cpu"})
    cfg["resources"] = {"classify": {"runtime": 5}}
    cfg.update(overrides)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@functools.cache
def tiny_model_dir(name: str = "topic") -> Path:
    """A tiny real demo classifier on disk, built once per test process.

    Planning checks every classifier before pinning, so even tests that never load a
    model need one that would load; building the four takes ~0.1 s once torch is in.
    """
    from shardwise.demo.corpus import CATEGORIES, _records
    from shardwise.demo.tinymodels import build_weborganizer_demo_models

    root = Path(tempfile.mkdtemp(prefix="shardwise-tiny-models-"))
    atexit.register(shutil.rmtree, root, True)
    sample = [r["text"] for s, c, _ in CATEGORIES for r in _records(s, c, 0, SMALL, 0)]
    return build_weborganizer_demo_models(root, sample)[name]


def minimal_config(tmp_path: Path, corpus: Path | None = None, **over) -> dict:
    """A valid config whose model is never loaded (for planning and refusal tests)."""
    cfg = {
        "run_dir": str(tmp_path / "run"),
        "input": {"uri": str(corpus or tmp_path)},
        "output": {"uri": str(tmp_path / "labels")},
        "sharding": {"total_shards": 2},
        "classifiers": [{"name": "topic", "model": str(tiny_model_dir()), "input": "text"}],
    }
    cfg.update(over)
    return cfg


def snakemake_cmd(config: Path, *args: str, cores: int | None = 2) -> list[str]:
    """The command line of a local snakemake run of the repo's workflow (``cores`` None:
    none given, a profile's executor decides)."""
    return [
        sys.executable, "-m", "snakemake",
        "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(config.parent),
        "--configfile", str(config),
        *(["--cores", str(cores)] if cores is not None else []),
        *args,
    ]  # fmt: skip


def run_snakemake(config: Path, *args: str, check: bool = True, timeout: int = 600):
    """Run snakemake to completion; returns the CompletedProcess (stdout+stderr merged)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.run(
        snakemake_cmd(config, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-6000:]}")
    return proc


def input_files(corpus: Path) -> list[str]:
    """Relative paths of the corpus's source files."""
    return sorted(
        str(p.relative_to(corpus))
        for p in corpus.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )


def assert_labelled_exactly_once(corpus: Path, labels: Path, classifiers=("topic",)) -> int:
    """Every input row has one sidecar row, same ids in order; returns rows checked."""
    rows = 0
    for rel in input_files(corpus):
        docs = read_documents(Location(str(corpus)), rel, FieldPaths())
        table = pq.read_table(labels / f"{rel}.labels.parquet")
        assert table["id"].to_pylist() == docs.ids, rel
        for name in classifiers:
            assert table[f"{name}_label"].null_count == 0, rel
        marker = json.loads((labels / f"{rel}.done").read_text())
        assert marker["rows"] == len(docs) == table.num_rows, rel
        stats = json.loads((labels / f"{rel}.stats.json").read_text())
        assert stats["docs"] == len(docs), rel
        rows += len(docs)
    return rows


def copy_tree(src: Path, dst: Path) -> None:
    """Copy a folder (helper for tests that mutate a corpus)."""
    shutil.copytree(src, dst, dirs_exist_ok=True)


#: A `shardwise` that logs each shard job to a ledger before running the real CLI: which
#: shard ran how often, whatever kills and restarts a test puts around it.
_LEDGER_SHARDWISE = """#!{python}
import os, sys
from shardwise.cli.main import main

if "classify-shard" in sys.argv:
    shard = sys.argv[sys.argv.index("--shard") + 1]
    with open(os.environ["SHARDWISE_TEST_LEDGER"], "a") as fh:
        fh.write(f"{{shard}} {{os.environ.get('SLURM_JOB_ID', '-')}} {{os.getpid()}}\\n")
sys.exit(main())
"""


@dataclass(frozen=True)
class Gate:
    """The test side of ``shardwise.classify.gate``: shard jobs stop at one point and wait.

    ``env()`` is what the jobs need; :meth:`wait` returns once the given number of shard
    jobs stand at the gate (the event a racing test synchronises on); :meth:`open` lets
    them go on. The timeouts are generous deadlines for failure, never triggers.
    """

    directory: Path
    after_files: int = 0

    def env(self) -> dict[str, str]:
        return {GATE_ENV: str(self.directory), AFTER_ENV: str(self.after_files)}

    def waiting(self) -> set[int]:
        return {int(p.name.split(".")[0]) for p in self.directory.glob("*.waiting")}

    def wait(self, jobs: int, *, timeout: float = 600, alive=None) -> set[int]:
        """The shards waiting once ``jobs`` of them are; fails after ``timeout`` s, or
        when ``alive()`` says the process under test ended first."""
        deadline = time.monotonic() + timeout
        while len(found := self.waiting()) < jobs:
            if alive is not None and not alive():
                raise AssertionError(f"the run ended with {len(found)} of {jobs} job(s) gated")
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(found)} of {jobs} job(s) at the gate after {timeout} s")
            time.sleep(0.05)
        return found

    def open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / OPEN).touch()


def wait_until(predicate, what: str, timeout: float = 300) -> None:
    """Wait for an event the code under test produces; ``timeout`` only bounds a failure."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def gated_shardwise(directory: Path, ledger: Path, gate: Gate | None = None) -> dict[str, str]:
    """Environment whose `shardwise` logs each shard job to ``ledger`` (and whose jobs stop
    at ``gate``). The rule runs `shardwise classify-shard`; the wrapper comes first on
    PATH (jobs inherit the environment, SLURM ones through --export=ALL)."""
    directory, ledger = directory.resolve(), ledger.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "shardwise"
    exe.write_text(_LEDGER_SHARDWISE.format(python=sys.executable))
    exe.chmod(0o755)
    ledger.touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    env["PATH"] = f"{directory}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["SHARDWISE_TEST_LEDGER"] = str(ledger)
    env["PYTHONUNBUFFERED"] = "1"
    if gate is not None:
        env.update(gate.env())
    return env


def ledger_counts(ledger: Path) -> dict[int, int]:
    """How many times each shard's job started (from the ledger)."""
    counts: dict[int, int] = {}
    for line in ledger.read_text().splitlines():
        shard = int(line.split()[0])
        counts[shard] = counts.get(shard, 0) + 1
    return counts
