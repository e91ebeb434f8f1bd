"""Dolma in, Dolma out, with the real ``dolma mix`` (dolma 1.2.1, in its own venv).

A Dolma-layout corpus (``documents/.../*.json.gz`` and ``.json.zst``, ``metadata.url``)
is labelled with the demo models, its attributes are written as the run goes (or
exported afterwards, on S3), and ``dolma mix`` with the config ``shardwise dolma
mix-config`` prints must keep exactly the documents whose sidecar rows have the label,
file by file. The real toolkit: the ``dolma_cli`` fixture (``tests/e2e.py``).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
import zstandard
from e2e import run_snakemake

from shardwise.classify.shard_job import run_shard
from shardwise.cli.main import main
from shardwise.demo.corpus import DemoSize, demo_config, write_corpus
from shardwise.ops.verify import check as verify
from shardwise.planner.prepare import prepare_run
from shardwise.run import dolma as rdolma
from shardwise.run import plan
from shardwise.run.sidecar import read_sidecar
from shardwise.store.location import Location

REPO = Path(__file__).resolve().parent.parent
SIZE = DemoSize(files_per_category=2, docs_per_file=30, median_words=20, max_words=60)

pytestmark = pytest.mark.slow


def dolma_config(root: Path, models: Path, corpus: str, **dolma) -> dict:
    """The Dolma demo's config over ``corpus`` with the demo models, on the CPU."""
    cfg = demo_config(root, total_shards=3, dolma=True)
    cfg["input"]["uri"] = corpus
    cfg["output"]["dolma"] = {"enabled": True, **dolma}
    for c in cfg["classifiers"]:
        c["model"] = str(models / c["name"])
    cfg["inference"].update({"max_length": 128, "device": "cpu"})
    return cfg


def label(cfg: dict) -> Path:
    """Plan and label in process with the real (tiny) models; the run directory."""
    prepare_run(cfg, main_process=True, dryrun=True)
    run_dir = Path(cfg["run_dir"])
    for shard in sorted(plan.nonempty_shards(plan.load(run_dir))):
        run_shard(run_dir, shard, progress=False)
    return run_dir


def sidecars(labels: Location, classifier: str) -> dict[str, tuple[list[str], list[str]]]:
    """Per source file, its sidecar's ids and ``classifier``'s label of each."""
    out = {}
    for rel, _ in labels.list_files():
        if rel.endswith(".labels.parquet"):
            table = read_sidecar(labels.read_bytes(rel)).to_pydict()
            out[rel.removesuffix(".labels.parquet")] = (table["id"], table[f"{classifier}_label"])
    return out


def wanted(labels: Location, classifier: str, label_name: str) -> dict[str, list[str]]:
    """Per source file, the ids its sidecar gives ``label_name`` (in order; none: absent)."""
    out = {}
    for rel, (ids, got) in sidecars(labels, classifier).items():
        kept = [i for i, lb in zip(ids, got, strict=True) if lb == label_name]
        if kept:
            out[rel] = kept
    return out


def mixed_ids(out: Location) -> list:
    """The ids of the documents a mix wrote, as its JSON has them."""
    kept = []
    for rel, _ in out.list_files():
        data = gzip.decompress(out.read_bytes(rel)) if rel.endswith(".gz") else out.read_bytes(rel)
        kept += [json.loads(line)["id"] for line in data.decode().splitlines()]
    return kept


def mixed(out: Location, labels: Location) -> dict[str, list[str]]:
    """Per source file (by its sidecar's ids: dolma's provenance names only the file's
    base name), the ids the mix kept, in order; every kept id is one of a file's."""
    kept = [str(i) for i in mixed_ids(out)]  # a sidecar keeps an integer id as its text
    assert len(kept) == len(set(kept)), "a document was mixed twice"
    owner = {i: rel for rel, (ids, _) in sidecars(labels, "topic").items() for i in ids}
    by_file: dict[str, list[str]] = defaultdict(list)
    for doc_id in kept:
        by_file[owner[doc_id]].append(doc_id)
    return {rel: sorted(ids) for rel, ids in by_file.items()}


def sort_ids(found: dict[str, list[str]]) -> dict[str, list[str]]:
    return {rel: sorted(ids) for rel, ids in found.items()}


def mix(
    dolma_cli: str, run_dir: Path, keep: str, output: str, tmp: Path, header_env: bool = False
) -> dict:
    """``shardwise dolma mix-config`` then the real ``dolma mix``; with ``header_env`` in
    the environment that the config's first lines name (and no endpoint of our own). The
    config."""
    config = tmp / f"mix-{keep.replace('=', '-').replace(' ', '_')}.yaml"
    assert main(["dolma", "mix-config", "--run-dir", str(run_dir), "--keep", keep,
                 "--output", output, "--out", str(config)]) == 0  # fmt: skip
    env = dict(re.findall(r"^#\s+export (\w+)=(\S+)", config.read_text(), re.M))
    assert bool(env) == header_env, config.read_text()[:600]
    proc = subprocess.run([dolma_cli, "-c", str(config), "mix"], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Mismatched ids" not in proc.stderr and "Missing attributes" not in proc.stderr
    return yaml.safe_load(config.read_text())


def integer_ids_and_glob_names(documents: Path, marks: str = "?*") -> list[str]:
    """Give every document a JSON integer id, and in two folders rename the first file to
    a glob pattern that matches its sibling too (``part-000?.json.gz`` beside
    ``part-0001.json.gz``: dolma mix reads either name as a pattern); the new names."""
    n = 0
    for path in sorted(documents.rglob("*.json.*")):
        rows = [
            json.loads(line)
            for line in rdolma.decompress(path.read_bytes(), path.name).splitlines()
        ]
        for row in rows:
            row["id"], n = n, n + 1
        path.write_bytes(
            rdolma.compress("".join(json.dumps(r) + "\n" for r in rows).encode(), path.name)
        )
    renamed = []
    for folder, mark in zip(("cc/cooking", "cc/sports"), marks, strict=False):
        first, second = sorted((documents / folder).iterdir())
        ext = first.name.split(".", 1)[1]
        text = rdolma.decompress(second.read_bytes(), second.name)
        second.unlink()  # the sibling in the same compression, so the pattern matches it
        (documents / folder / f"part-0001.{ext}").write_bytes(rdolma.compress(text, ext))
        first.rename(first.with_name(f"part-000{mark}.{ext}"))
        renamed.append(f"{folder}/part-000{mark}.{ext}")
    return renamed


@pytest.fixture(scope="module")
def dolma_run(tmp_path_factory, demo_models) -> dict:
    """One Dolma-layout run labelled with attributes as it goes (shared below): its ids
    are JSON integers and two of its names are glob patterns (dolma mix's two traps)."""
    root = tmp_path_factory.mktemp("dolma")
    write_corpus(root / "ds" / "documents", SIZE, dolma=True)
    odd = integer_ids_and_glob_names(root / "ds" / "documents")
    assert all((root / "ds" / "documents" / rel).exists() for rel in odd)
    cfg = dolma_config(root, demo_models, str(root / "ds" / "documents"))
    return {"root": root, "cfg": cfg, "run_dir": label(cfg)}


def test_dolma_mix_keeps_exactly_the_documents_with_the_label_in_every_file(dolma_run, dolma_cli):
    root, run_dir = dolma_run["root"], dolma_run["run_dir"]
    names = {p.name for p in (root / "ds" / "documents").rglob("*.json.*")}
    assert {n.rsplit(".", 1)[-1] for n in names} == {"gz", "zst"}
    assert verify.verify_run(run_dir, complete=True).ok
    labels = Location(str(root / "labels"))
    for classifier in ("topic", "format"):
        counts: dict[str, int] = defaultdict(int)
        for _ids, got in sidecars(labels, classifier).values():
            for label_name in got:
                counts[label_name] += 1
        label_name = max(counts, key=counts.get)  # the commonest: several files hold it
        out = root / "mix" / classifier
        config = mix(dolma_cli, run_dir, f"{classifier}={label_name}", str(out), root)
        want = wanted(labels, classifier, label_name)
        assert mixed(Location(str(out)), labels) == sort_ids(want)  # each document once
        assert len(want) > 1 and sum(map(len, want.values())) == counts[label_name]
        assert {type(i) for i in mixed_ids(Location(str(out)))} == {int}  # as the corpus has them
    streams = {s["name"]: s["documents"] for s in config["streams"]}
    # part-000? and part-000* match their sibling part-0001: a set of their own, escaped
    assert sorted(streams) == ["weborganizer", "weborganizer-exact-1"]
    odd = sorted(p.rsplit("/", 1)[1] for p in streams["weborganizer-exact-1"])
    assert odd == ["part-000[*].json.zst", "part-000[?].json.gz"], streams


def test_a_deleted_or_short_attributes_file_is_named_and_rewritten_from_the_sidecar(
    dolma_run, dolma_cli, capsys
):
    root, run_dir = dolma_run["root"], dolma_run["run_dir"]
    attributes = root / "ds" / "attributes" / "weborganizer"
    files = sorted(p for p in attributes.rglob("*") if p.is_file())
    gone, short = files[0], next(p for p in files if p.name.endswith(".zst"))
    gone.unlink()
    lines = zstandard.ZstdDecompressor().decompress(short.read_bytes()).splitlines(True)
    short.write_bytes(zstandard.ZstdCompressor().compress(b"".join(lines[:-3])))
    assert main(["verify", "--run-dir", str(run_dir)]) == 1
    out = capsys.readouterr()
    rel = str(gone.relative_to(attributes))
    assert f"{rel}.done: marker without its dolma attributes (dolma mix ignores that" in out.out
    assert f"{short}: has {len(lines) - 3} rows, the documents {len(lines)}" in out.out
    assert "writes the Dolma attributes of 2 labelled file(s) again" in out.out
    stamps = {p: p.stat().st_mtime_ns for p in (root / "labels").rglob("*.done")}
    assert main(["verify", "--run-dir", str(run_dir), "--repair"]) == 0
    assert gone.exists() and {p: p.stat().st_mtime_ns for p in stamps} == stamps  # no relabel
    assert verify.verify_run(run_dir, complete=True).ok
    labels = Location(str(root / "labels"))
    label_name = some_label(labels)
    out_dir = root / "mix-after-repair"
    mix(dolma_cli, run_dir, f"topic={label_name}", str(out_dir), root)
    assert mixed(Location(str(out_dir)), labels) == sort_ids(wanted(labels, "topic", label_name))


def some_label(labels: Location) -> str:
    """The topic label of the run's first document."""
    return next(iter(sidecars(labels, "topic").values()))[1][0]


def test_attributes_exported_afterwards_on_s3_mix_there_too(
    tmp_path, demo_models, dolma_cli, s3, capsys
):
    corpus = Location(s3.url("ds/documents"), s3.options())
    write_corpus(tmp_path / "documents", SIZE, dolma=True)
    # '?' is no pattern to dolma on S3 ('*' is, unescapable: tests/ops/dolma/test_dolma_exact.py)
    integer_ids_and_glob_names(tmp_path / "documents", marks="?")
    for path in sorted(p for p in (tmp_path / "documents").rglob("*") if p.is_file()):
        corpus.write_bytes(str(path.relative_to(tmp_path / "documents")), path.read_bytes())
    cfg = dolma_config(tmp_path, demo_models, s3.url("ds/documents"))
    cfg["output"] = {"uri": s3.url("labels")}  # labelled without attributes first
    cfg["storage"] = s3.storage_config()
    run_dir = label(cfg)
    cfg["output"]["dolma"] = {"enabled": True}
    prepare_run(cfg, main_process=True, dryrun=True)  # `snakemake -n` records the setting
    assert not verify.verify_run(run_dir).ok  # labelled files without their attributes
    assert main(["dolma", "export", "--run-dir", str(run_dir)]) == 0
    assert "12 written, 0 already there" in capsys.readouterr().out
    assert main(["dolma", "export", "--run-dir", str(run_dir)]) == 0  # resumable, idempotent
    assert "0 written, 12 already there" in capsys.readouterr().out
    assert verify.verify_run(run_dir, complete=True).ok
    labels = Location(s3.url("labels"), s3.options())
    label_name = some_label(labels)
    mix(dolma_cli, run_dir, f"topic={label_name}", s3.url("mix"), tmp_path, header_env=True)
    got = mixed(Location(s3.url("mix"), s3.options()), labels)
    assert got == sort_ids(wanted(labels, "topic", label_name))


def test_the_export_runs_as_snakemake_jobs_per_shard(dolma_run):
    """`snakemake dolma_all`: one job per shard, nothing relabelled (last: it rewrites)."""
    root, run_dir = dolma_run["root"], dolma_run["run_dir"]
    attributes = root / "ds" / "attributes"
    shutil.rmtree(attributes)
    stamps = {p: p.stat().st_mtime_ns for p in (root / "labels").rglob("*.done")}
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(dolma_run["cfg"]))
    run_snakemake(config, "dolma_all")
    assert sorted(p.name for p in (run_dir / "dolma").iterdir()) == ["0.done", "1.done", "2.done"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert verify.verify_run(run_dir, complete=True).ok


@pytest.fixture(scope="module")
def counted_run(tmp_path_factory, demo_models) -> dict:
    """A Dolma-layout run that counts tokens (``domains.tokenizer``), for ``select``."""
    root = tmp_path_factory.mktemp("select")
    write_corpus(root / "ds" / "documents", SIZE, dolma=True)
    cfg = dolma_config(root, demo_models, str(root / "ds" / "documents"))
    cfg["domains"] = {"tokenizer": str(demo_models / "topic")}
    return {"root": root, "cfg": cfg, "run_dir": label(cfg), "tokenizer": demo_models / "topic"}


def _uniform_weights(run_dir: Path, path: Path) -> None:
    """Equal weight on every topic x format cell the run holds (by WebOrganizer id)."""
    proc = subprocess.run(["shardwise", "domains", "--run-dir", str(run_dir), "--format",
                           "weborganizer"], capture_output=True, text=True, check=True)  # fmt: skip
    cells = json.loads(proc.stdout)
    path.write_text(json.dumps([{"domain": c["domain"], "weight": 1 / len(cells)} for c in cells]))


def test_select_mixes_each_document_as_many_times_as_selected_with_the_report_s_tokens(
    counted_run, dolma_cli, capsys
):
    from tokenizers import Tokenizer

    root, run_dir = counted_run["root"], counted_run["run_dir"]
    weights = root / "uniform.json"
    _uniform_weights(run_dir, weights)
    args = ["select", "--run-dir", str(run_dir), "--weights", str(weights), "--tokens", "20k",
            "--max-repeat", "3", "--name", "uni", "--format", "json"]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["complete"] and report["copies"] > report["selected_docs"] > 0
    base = run_dir / "selections" / "uni"
    want: dict[str, int] = {}
    for path in (base / "files").rglob("*.parquet"):
        table = pq.read_table(path).to_pydict()
        want.update(zip(table["id"], table["repeats"], strict=True))
    assert sum(want.values()) == report["copies"]
    proc = subprocess.run([dolma_cli, "-c", str(base / "mix.yaml"), "mix"], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    texts: dict[str, list[str]] = defaultdict(list)
    for path in (base / "mix").iterdir():
        for line in gzip.decompress(path.read_bytes()).decode().splitlines():
            doc = json.loads(line)
            texts[doc["id"]].append(doc["text"])
    assert {i: len(t) for i, t in texts.items()} == want
    tok = Tokenizer.from_file(str(counted_run["tokenizer"] / "tokenizer.json"))
    tok.no_truncation()
    counted = sum(len(tok.encode(t, add_special_tokens=False).ids) for ts in texts.values()
                  for t in ts)  # fmt: skip
    assert counted == report["selected_tokens"]


def test_a_selection_over_a_shrunk_run_stops_dolma_and_names_what_changed(
    tmp_path, demo_models, dolma_cli, capsys
):
    """``plan --extend --gone remove`` after a selection: its old mix config stops the real
    ``dolma mix`` (which names the stale selection), the gone files' selection attribute
    files are removed with their outputs, and the report says files were removed."""
    write_corpus(tmp_path / "ds" / "documents", SIZE, dolma=True)
    cfg = dolma_config(tmp_path, demo_models, str(tmp_path / "ds" / "documents"))
    cfg["domains"] = {"tokenizer": str(demo_models / "topic")}
    run_dir = label(cfg)
    weights = tmp_path / "uniform.json"
    _uniform_weights(run_dir, weights)
    assert main(["select", "--run-dir", str(run_dir), "--weights", str(weights), "--tokens",
                 "5k", "--name", "s1"]) == 0  # fmt: skip
    attrs = tmp_path / "ds" / "attributes" / "s1"
    selected = sorted(str(p.relative_to(attrs)) for p in attrs.rglob("*.gz"))
    gone = selected[:2]
    for rel in gone:
        (tmp_path / "ds" / "documents" / rel).unlink()
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    capsys.readouterr()
    assert main(["plan", "--configfile", str(config), "--extend", "--gone", "remove"]) == 0
    said = capsys.readouterr().err
    assert "selection(s) s1 were made before this change: their mix.yaml now stops dolma" in said
    assert all(not (attrs / rel).exists() for rel in gone)  # removed with the gone outputs
    assert all((attrs / rel).exists() for rel in selected[2:])
    base = run_dir / "selections" / "s1"
    assert (base / "mix.yaml.stale").is_file()
    proc = subprocess.run([dolma_cli, "-c", str(base / "mix.yaml"), "mix"], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert proc.returncode != 0
    assert STALE_STREAM.format("s1") in proc.stderr, proc.stderr[-2000:]
    assert main(["select", "--run-dir", str(run_dir), "--name", "s1"]) == 0
    out = capsys.readouterr().out
    assert "since: 2 task(s) removed): files it selected have left the run" in out, out
    # reporting it never makes it runnable again (nor does selecting it again)
    assert (base / "mix.yaml").read_text().startswith("# STALE"), out
    assert "no dolma mix config: " in out and "is kept refused by dolma mix" in out, out
    assert main(["select", "--run-dir", str(run_dir), "--weights", str(weights), "--tokens",
                 "5k", "--name", "s1"]) == 1  # fmt: skip
    assert "no longer describes the run's labels" in capsys.readouterr().err
    _refused(dolma_cli, base, "s1")
    # a selection over the run as it is; then a file it read is repaired and relabelled
    assert main(["select", "--run-dir", str(run_dir), "--weights", str(weights), "--tokens",
                 "5k", "--name", "s2"]) == 0  # fmt: skip
    s2 = run_dir / "selections" / "s2"
    assert not (s2 / "mix.yaml").read_text().startswith("# STALE")
    read = sorted(
        rel for r in s2.glob("shards/*.json") for rel in json.loads(r.read_text())["read"]
    )
    output = Path(cfg["output"]["uri"])
    stats = output / f"{read[0]}.stats.json"
    body = json.loads(stats.read_text())
    body["models"]["topic"]["content_hash"] = "0" * 64  # another model's labels
    stats.write_text(json.dumps(body))
    capsys.readouterr()
    main(["verify", "--run-dir", str(run_dir), "--repair"])
    out = capsys.readouterr().out
    assert f"retired {s2 / 'mix.yaml'}: selection 's2' read labels repaired now" in out, out
    _refused(dolma_cli, s2, "s2")
    label(cfg)  # the workflow relabels it
    assert main(["select", "--run-dir", str(run_dir), "--name", "s2"]) == 0
    out = capsys.readouterr().out
    assert f"1 file(s) it read changed since: {read[0]} (relabelled since)" in out, out
    _refused(dolma_cli, s2, "s2")


STALE_STREAM = "stale-selection-{}-the-labels-changed-select-anew"


def _refused(dolma_cli: str, base: Path, name: str) -> None:
    """The real ``dolma mix`` refuses the selection's mix config, naming it stale."""
    proc = subprocess.run([dolma_cli, "-c", str(base / "mix.yaml"), "mix"], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert proc.returncode != 0 and STALE_STREAM.format(name) in proc.stderr, proc.stderr[-2000:]


def test_select_is_reproducible_by_seed_and_refuses_bad_requests(counted_run, capsys):
    root, run_dir = counted_run["root"], counted_run["run_dir"]
    weights = root / "uniform-2.json"
    _uniform_weights(run_dir, weights)

    def files(name: str, seed: int) -> dict[str, bytes]:
        assert main(["select", "--run-dir", str(run_dir), "--weights", str(weights),
                     "--tokens", "10k", "--seed", str(seed), "--name", name]) == 0  # fmt: skip
        base = run_dir / "selections" / name / "files"
        return {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*.parquet")}

    assert files("s1", 1) == files("s1b", 1)
    assert files("s2", 2) != files("s1", 1)
    capsys.readouterr()
    bad = root / "bad.json"
    bad.write_text(json.dumps([{"domain": ["Helth", "Tutorial"], "weight": 1.0}]))
    assert main(["select", "--run-dir", str(run_dir), "--weights", str(bad), "--tokens", "1k",
                 "--name", "bad"]) == 1  # fmt: skip
    assert "topic 'Helth' is no label of this run's documents; did you mean 'Health'" in (
        capsys.readouterr().err
    )
    assert main(["select", "--run-dir", str(run_dir), "--weights", str(weights), "--tokens",
                 "1T", "--name", "big"]) == 1  # fmt: skip
    assert "lower --tokens to at most" in capsys.readouterr().err
    assert main(["select", "--run-dir", str(run_dir), "--weights", str(weights), "--tokens",
                 "5k", "--name", "s1"]) == 1  # fmt: skip
    assert "was planned with other settings" in capsys.readouterr().err
    assert not (run_dir / "selections" / "bad").exists()


def test_select_all_selects_the_planned_shards_as_snakemake_jobs(counted_run, capsys):
    root, run_dir = counted_run["root"], counted_run["run_dir"]
    weights = root / "uniform-3.json"
    _uniform_weights(run_dir, weights)
    assert main(["select", "--run-dir", str(run_dir), "--weights", str(weights), "--tokens",
                 "10k", "--name", "jobs", "--plan-only", "--seed", "1"]) == 0  # fmt: skip
    assert "0 of 3 shard(s) selected so far" in capsys.readouterr().out
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(counted_run["cfg"]))
    run_snakemake(config, "select_all")
    shards = run_dir / "selections" / "jobs" / "shards"
    assert sorted(p.name for p in shards.iterdir()) == ["0.json", "1.json", "2.json"]
    assert main(["select", "--run-dir", str(run_dir), "--name", "jobs", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["complete"]
    here = run_dir / "selections" / "s1" / "files"  # the same request selected here, seed 1
    there = run_dir / "selections" / "jobs" / "files"
    assert {p.relative_to(there): p.read_bytes() for p in there.rglob("*.parquet")} == {
        p.relative_to(here): p.read_bytes() for p in here.rglob("*.parquet")
    }


def test_a_run_not_yet_complete_is_refused_unless_partial_and_then_every_line_says_so(
    counted_run, tmp_path, capsys
):
    run_dir = tmp_path / "run"
    shutil.copytree(counted_run["run_dir"], run_dir)
    shutil.rmtree(run_dir / "selections", ignore_errors=True)
    (run_dir / "shards" / "0.done").unlink()
    weights = tmp_path / "uniform.json"
    _uniform_weights(counted_run["run_dir"], weights)
    args = ["select", "--run-dir", str(run_dir), "--weights", str(weights), "--tokens", "2k"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "the run is labelled for" in err and "pass --partial to select from what is" in err
    assert not (run_dir / "selections").exists()
    assert main([*args, "--partial"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "%" in ln]
    assert lines and all("[from what is labelled:" in ln for ln in lines)


def test_weborganizer_statistics_of_a_complete_run_equal_counts_from_the_sidecars(counted_run):
    from shardwise.ops.domains.compute import weborganizer_ids

    root, run_dir = counted_run["root"], counted_run["run_dir"]
    ids = weborganizer_ids()
    tokens: dict[tuple[int, int], int] = defaultdict(int)
    docs: dict[tuple[int, int], int] = defaultdict(int)
    for path in (root / "labels").rglob("*.labels.parquet"):
        t = pq.read_table(path).to_pydict()
        for topic, fmt, n in zip(t["topic_label"], t["format_label"], t["tokens"], strict=True):
            cell = (ids["topic"][topic], ids["format"][fmt])
            tokens[cell] += n
            docs[cell] += 1
    proc = subprocess.run(["shardwise", "domains", "--run-dir", str(run_dir), "--format",
                           "weborganizer"], capture_output=True, text=True, check=True)  # fmt: skip
    got = json.loads(proc.stdout)
    assert {tuple(e["domain"]): (e["tokens"], e["documents"]) for e in got} == {
        c: (tokens[c], docs[c]) for c in tokens
    }
    total = sum(tokens.values())
    assert all(abs(e["weight"] - tokens[tuple(e["domain"])] / total) < 1e-12 for e in got)
    assert not any("estimated" in e for e in got)
