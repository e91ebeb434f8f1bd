"""A run that counts tokens in the training tokenizer: sidecars, pin, ``--weight tokens``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from e2e import tiny_model_dir
from inproc import label, plan_run
from tokenizers import Tokenizer

from shardwise.cli.main import main
from shardwise.demo.tinymodels import build_wordpiece_tokenizer
from shardwise.errors import DomainsError, ModelError, RunMismatchError
from shardwise.ops.domains import compute as domains
from shardwise.ops.domains import render as domains_format
from shardwise.ops.verify import check as verify
from shardwise.run import outputs, plan
from shardwise.run.fields import FieldPaths
from shardwise.run.reader import read_documents
from shardwise.snakefile import prepare_run
from shardwise.store.location import Location


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """A labelled in-process run with ``domains.tokenizer`` set."""
    root = tmp_path_factory.mktemp("tokens")
    tokenizer = tiny_model_dir("topic")
    cfg = plan_run(root, total_shards=3, domains={"tokenizer": str(tokenizer)})
    label(Path(cfg["run_dir"]))
    return cfg, root, tokenizer


def test_each_document_s_full_token_count_is_in_its_sidecar_and_pinned(counted):
    cfg, root, tokenizer = counted
    run_dir = Path(cfg["run_dir"])
    own = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    own.no_truncation()
    total = 0
    for rel in plan.load(run_dir)["file"].to_pylist():
        texts = read_documents(Location(str(root / "corpus")), rel, FieldPaths()).texts
        side = pq.read_table(root / "labels" / outputs.SIDECAR.rel(rel))
        want = [len(own.encode(t, add_special_tokens=False).ids) for t in texts]
        assert side["tokens"].to_pylist() == want
        total += sum(want)
    pinned = json.loads((run_dir / "run.json").read_text())["labelling"]
    assert len(pinned["count_tokenizer"]) == 64
    assert verify.verify_run(run_dir, complete=True).ok
    d = domains.view(run_dir, classifier="topic", weight="tokens")
    assert d.est.exact and d.est.corpus_total == total  # the fake engine labels all "a"
    assert domains_format.summary_lines(d)[0].startswith("topic: share of tokens, exact")


def test_a_sidecar_without_its_token_counts_is_a_verify_problem(counted, tmp_path):
    cfg, root, _tokenizer = counted
    run_dir = Path(cfg["run_dir"])
    rel = plan.load(run_dir)["file"][0].as_py()
    path = root / "labels" / outputs.SIDECAR.rel(rel)
    before = path.read_bytes()
    try:
        pq.write_table(pq.read_table(path).drop(["tokens"]), path)
        found = [p.what for p in verify.verify_run(run_dir).problems]
        assert any("no tokens column (the run counts tokens" in w for w in found), found
    finally:
        path.write_bytes(before)


def test_another_tokenizer_on_the_same_output_is_refused(counted, tmp_path):
    cfg, _root, _tokenizer = counted
    other = build_wordpiece_tokenizer(["other words entirely"] * 20, tmp_path / "tok", 300)
    del other
    with pytest.raises(RunMismatchError, match=r"labelling.count_tokenizer: '[0-9a-f]+' -> '"):
        prepare_run({**cfg, "domains": {"tokenizer": str(tmp_path / "tok")}}, main_process=True,
                    dryrun=True, report=False)  # fmt: skip
    with pytest.raises(ModelError, match=r"config domains.tokenizer '.*nowhere'"):
        prepare_run({**cfg, "run_dir": str(tmp_path / "r2"), "domains": {"tokenizer": str(
            tmp_path / "nowhere")}}, main_process=True, dryrun=True, report=False)  # fmt: skip
    assert not (tmp_path / "r2" / "run.json").exists()


def test_weight_tokens_on_a_run_that_counts_none_is_refused_with_the_setting(tmp_path, capsys):
    cfg = plan_run(tmp_path, total_shards=2)
    label(Path(cfg["run_dir"]))
    with pytest.raises(DomainsError, match=r"counted no tokens: set domains.tokenizer"):
        domains.view(Path(cfg["run_dir"]), weight="tokens")
    assert main(["domains", "--run-dir", cfg["run_dir"], "--weight", "tokens"]) == 1
    assert "set domains.tokenizer" in capsys.readouterr().err
