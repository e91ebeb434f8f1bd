"""The per-file output contract: one registry that every reader and writer asks.

The last test adds an output kind in the test itself and shows that the shard job writes
it, a re-plan does not take it for input, and verify and coverage check it: a new kind
is one registry entry with its builder, parser and checker, and nothing else.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from inproc import TINY, demo_run_config, label, plan_run

from shardwise.demo.corpus import write_corpus
from shardwise.errors import RecordError
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.verify import check as verify
from shardwise.ops.verify import repair as verify_repair
from shardwise.planner.prepare import prepare_run
from shardwise.run import dolma, manifest, outputs, sidecar
from shardwise.run.record import load_object
from shardwise.run.sidecar import read_sidecar, to_parquet_bytes


def test_every_kind_has_a_builder_a_parser_a_checker_and_the_marker_comes_last():
    kinds = outputs.kinds()
    assert kinds[-2:] == (outputs.STATS, outputs.MARKER)
    assert len({k.name for k in kinds}) == len({k.suffix for k in kinds}) == len(kinds)
    for kind in kinds:
        assert callable(kind.build) and callable(kind.parse) and callable(kind.check)
    assert outputs.vouched() == kinds[:-1]


@pytest.mark.parametrize(
    "kind", [k for k in outputs.kinds() if k.root == "output"], ids=lambda k: k.name
)
def test_every_kind_is_not_an_input_under_the_output_root_and_is_one_elsewhere(kind):
    name = kind.rel("a/part-0.jsonl") + ".jsonl"  # an output's name can end like an input
    own = kind.rel("a/part-0.jsonl")
    listing = [("a/part-0.jsonl", 1), (own, 1)]
    under = manifest.select_files(listing, output_prefix="")
    assert [rel for rel, _ in under.files] == ["a/part-0.jsonl"] and under.outputs == [own]
    elsewhere = manifest.select_files([(name, 1)], output_prefix=None)
    assert [rel for rel, _ in elsewhere.files] == [name]


def test_files_under_another_root_of_the_run_are_never_inputs():
    listing = [("documents/a.json.gz", 1), ("attributes/weborganizer/documents/a.json.gz", 1)]
    picked = manifest.select_files(listing, output_prefix=None, other_roots=("attributes/",))
    assert [rel for rel, _ in picked.files] == ["documents/a.json.gz"]
    assert picked.outputs == ["attributes/weborganizer/documents/a.json.gz"]


def test_the_longest_suffix_names_the_kind_and_the_source():
    assert outputs.kind_of("x.parquet.labels.parquet") == (outputs.SIDECAR, "x.parquet")
    assert outputs.kind_of("x.labels.parquet.done") == (outputs.MARKER, "x.labels.parquet")
    assert outputs.kind_of("x.parquet") is None
    assert outputs.kind_of(".done") is None


def _words(labelled: outputs.Labelled) -> bytes:
    return json.dumps({"file": labelled.rel, "rows": len(labelled.ids)}).encode()


def _words_problems(record: dict, want: outputs.Expected) -> list[str]:
    return [] if record.get("rows") == want.rows else [f"rows {record.get('rows')} != {want.rows}"]


WORDS = outputs.OutputKind(
    name="words", suffix=".words.jsonl", build=_words, parse=load_object, check=_words_problems
)


def test_a_new_kind_is_written_checked_and_counted_with_no_other_edit(tmp_path, monkeypatch):
    monkeypatch.setattr(outputs, "KINDS", (outputs.SIDECAR, WORDS, outputs.STATS, outputs.MARKER))
    cfg = plan_run(tmp_path, output={"uri": str(tmp_path / "corpus" / "labels")})
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    labels = tmp_path / "corpus" / "labels"
    written = sorted(labels.rglob("*.words.jsonl"))
    assert len(written) == 6  # the shard job wrote it for every file, before the marker
    # the outputs lie under the input root and end in .jsonl: a re-plan does not take them
    info = prepare_run(cfg, main_process=True, dryrun=True)
    assert any("skipped 25 shardwise output(s)" in m for m in info.messages), (
        info.messages
    )  # + run.json
    assert verify.verify_run(run_dir, complete=True).ok
    assert coverage.compute(coverage.load_state(run_dir)).outputs_missing == {}

    gone, damaged = written[0], written[1]
    gone.unlink()
    damaged.write_text('{"rows": 99}')
    report = verify.verify_run(run_dir)
    whats = [f"{f.where}: {f.what}" for f in report.problems]
    marker = outputs.MARKER.rel(outputs.kind_of(gone.name)[1])
    assert any(w.endswith(f"{marker}: marker without its words") for w in whats), whats
    assert any(w == f"{damaged}: rows 99 != 5" for w in whats), whats
    assert len(report.broken_files) == 2
    assert coverage.compute(coverage.load_state(run_dir)).outputs_missing == {"words": 1}

    verify_repair.repair(run_dir, report)
    label(run_dir)  # relabels exactly the two files
    assert verify.verify_run(run_dir, complete=True).ok
    damaged.write_text("not json")
    (problem,) = verify.verify_run(run_dir).problems
    assert problem.what.startswith("unreadable words: not valid JSON")


def test_a_parser_refuses_what_is_not_its_format():
    with pytest.raises(RecordError, match="x.done: not a JSON object"):
        outputs.MARKER.parse(b"[1]", "x.done")
    with pytest.raises(RecordError, match="not a Parquet table"):
        outputs.SIDECAR.parse(b"PAR1 no", "x.labels.parquet")


def test_ids_written_as_numbers_stay_numbers_in_the_attributes_and_old_sidecars_are_named(
    tmp_path,
):
    cfg = demo_run_config(tmp_path, 2)
    documents = tmp_path / "ds" / "documents"
    cfg["input"] = {"uri": str(documents), "url_field": "metadata.url"}
    cfg["output"]["dolma"] = {"enabled": True}
    n = 0
    for path in write_corpus(documents, TINY, dolma=True):
        rel = path.name
        rows = [json.loads(line) for line in dolma.decompress(path.read_bytes(), rel).splitlines()]
        for row in rows:
            row["id"], n = n, n + 1  # a corpus whose ids are JSON integers
        path.write_bytes(dolma.compress("".join(json.dumps(r) + "\n" for r in rows).encode(), rel))
    prepare_run(cfg, main_process=True, dryrun=True)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    attributes = sorted((tmp_path / "ds" / "attributes" / "weborganizer").rglob("*.json*"))
    parsed = [dolma.AttributesFile.from_bytes(f.read_bytes(), f.name) for f in attributes]
    ids = [i for one in parsed for i in one.ids]
    assert sorted(ids) == list(range(n))  # integers, as dolma mix compares them
    assert verify.verify_run(run_dir, complete=True).ok

    # a sidecar written before shardwise kept the ids' type: named, and --repair relabels it
    old = sorted((tmp_path / "labels").rglob("*" + sidecar.SUFFIX))[0]
    old.write_bytes(to_parquet_bytes(read_sidecar(old.read_bytes()).drop([sidecar.ID_JSON])))
    report = verify.verify_run(run_dir)
    (problem,) = report.problems
    assert (problem.where, len(report.broken_files)) == (str(old), 1)
    assert "keeps id '" in problem.what and "JSON types differ" in problem.what, problem.what
    verify_repair.repair(run_dir, report)
    label(run_dir)
    assert verify.verify_run(run_dir, complete=True).ok


OUTPUTS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "outputs.md"


def test_the_outputs_table_lists_every_kind_in_write_order():
    """docs/outputs.md's table is the one list of per-file outputs the other pages link to."""
    text = OUTPUTS_PAGE.read_text("utf-8")
    section = text[text.index("## Outputs") :]
    table = section[: section.index("\n\n", section.index("| file | content |"))]
    listed = re.findall(r"^\| `([^`]+)` \|", table, re.MULTILINE)
    want = [
        f"<rel>{k.suffix}" if k.root == "output" else f"<{k.root} root>/<rel>{k.suffix}"
        for k in outputs.kinds()
    ]
    assert listed == want
