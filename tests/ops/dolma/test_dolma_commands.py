"""``shardwise dolma export|mix-config`` on in-process runs (the real mix: test_dolma_mix)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from inproc import TINY, demo_run_config, label

from shardwise.cli.main import main
from shardwise.config import StorageOptions
from shardwise.demo.corpus import write_corpus
from shardwise.errors import ConfigError
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.dolma import mix as dolma
from shardwise.ops.verify import check as verify
from shardwise.planner.prepare import prepare_run


def dolma_run(tmp_path: Path, *, layout: bool = True, **dolma_cfg) -> tuple[dict, Path]:
    """A planned run whose attributes go beside its documents (``layout``) or to a uri."""
    corpus = tmp_path / ("ds/documents" if layout else "corpus")
    write_corpus(corpus, TINY, dolma=layout)
    cfg = demo_run_config(tmp_path, 3)
    cfg["input"] = {"uri": str(corpus), "url_field": "metadata.url" if layout else "url"}
    cfg["output"]["dolma"] = {"enabled": True, **dolma_cfg}
    info = prepare_run(cfg, main_process=True, dryrun=True)
    return {"cfg": cfg, "messages": info.messages}, Path(cfg["run_dir"])


def test_parquet_files_get_none_and_the_dry_run_says_so(tmp_path):
    found, run_dir = dolma_run(tmp_path, layout=False, uri=str(tmp_path / "attrs"))
    assert any("3 Parquet file(s) get no Dolma attributes" in m for m in found["messages"])
    label(run_dir)
    written = sorted(p.name for p in (tmp_path / "attrs").rglob("*") if p.is_file())
    assert written and not any(n.endswith(".parquet") for n in written)
    assert verify.verify_run(run_dir, complete=True).ok
    done = dolma.export(run_dir, progress=False)
    assert (done.written, done.not_jsonl, done.present) == (0, 3, 3)
    next(p for p in (tmp_path / "attrs").rglob("*") if p.is_file()).unlink()
    assert coverage.compute(coverage.load_state(run_dir)).outputs_missing == {"dolma": 1}


def test_a_dolma_block_left_off_is_said_on_the_dry_run_and_writes_nothing(tmp_path):
    """``output.dolma`` settings without ``enabled: true`` change nothing: one dry-run line
    names them and the switch."""
    corpus = tmp_path / "ds/documents"
    write_corpus(corpus, TINY, dolma=True)
    cfg = demo_run_config(tmp_path, 3)
    cfg["input"] = {"uri": str(corpus), "url_field": "metadata.url"}
    cfg["output"]["dolma"] = {"name": "mylabels"}
    said = [m for m in prepare_run(cfg, main_process=True, dryrun=True).messages if "dolma" in m]
    assert said == [
        "note: config output.dolma.name set, but output.dolma.enabled is false: it changes "
        "nothing; set output.dolma.enabled: true to use it, or remove it"
    ]
    label(Path(cfg["run_dir"]))
    assert not (tmp_path / "ds/attributes").exists()


def test_mix_config_refuses_what_would_make_a_wrong_mix(tmp_path, capsys):
    _found, run_dir = dolma_run(tmp_path)
    label(run_dir)  # the fake engine labels every document "a"
    keep = [dolma.Selection.parse("topic=a")]
    config = dolma.mix_config(run_dir, keep, str(tmp_path / "mix"), min_prob=0.5)
    (stream,) = config["streams"]
    assert stream["attributes"] == ["weborganizer"] and len(stream["documents"]) == 6
    assert stream["filter"]["include"] == [
        '.attributes.weborganizer__topic__label == "a" and '
        ".attributes.weborganizer__topic__prob >= 0.5"
    ]
    with pytest.raises(ConfigError, match=r"no labelled document has topic 'A'; did you mean 'a'"):
        dolma.mix_config(run_dir, [dolma.Selection.parse("topic=A")], "out")
    with pytest.raises(ConfigError, match="'colour' is not a classifier of this run"):
        dolma.mix_config(run_dir, [dolma.Selection.parse("colour=a")], "out")
    with pytest.raises(ConfigError, match="give CLASSIFIER=LABEL"):
        dolma.Selection.parse("topic")
    gone = next(p for p in (tmp_path / "ds" / "attributes").rglob("*") if p.is_file())
    gone.unlink()
    with pytest.raises(ConfigError, match="have no attributes yet.*shardwise dolma export"):
        dolma.mix_config(run_dir, keep, "out")
    assert main(["dolma", "export", "--run-dir", str(run_dir)]) == 0
    assert "1 written, 5 already there" in capsys.readouterr().out


def test_a_mix_on_an_object_store_names_the_environment_dolma_needs():
    """dolma reads S3 with its own client: the config's head says what it needs (the
    real mix on S3 runs in exactly that environment: tests/test_dolma_mix.py)."""
    local = dolma.mix_stream("s", ["/ds/documents/a.jsonl"], "w", "/mix", [])
    assert dolma.store_environment({"streams": [local]}, None) == []
    assert dolma.mix_yaml({"streams": [local]}).startswith("streams:")
    remote = dolma.mix_stream("s", ["s3://b/ds/documents/a.jsonl"], "w", "/mix", [])
    options = StorageOptions(endpoint_url="https://acct.r2.cloudflarestorage.com", region="auto")
    text = dolma.mix_yaml({"streams": [remote]}, options)
    assert "#   export AWS_ENDPOINT_URL=https://acct.r2.cloudflarestorage.com\n" in text
    assert "#   export REGION=auto  # dolma reads REGION, not AWS_REGION\n" in text
    assert yaml.safe_load(text) == {"streams": [remote]}  # comments only
    bare = dolma.store_environment({"streams": [remote]}, StorageOptions(profile="lab"))
    assert "  export AWS_PROFILE=lab" in bare
    assert not any(line.startswith("  export AWS_ENDPOINT_URL") for line in bare)


@pytest.mark.parametrize(
    ("options", "why"),
    [
        (StorageOptions(endpoint_url="https://minio.lab.example:9000"), "is a host name"),
        (
            StorageOptions(endpoint_url="https://s3.lab.example", addressing_style="path"),
            "storage.addressing_style is path",
        ),
        (StorageOptions(addressing_style="path"), "storage.addressing_style is path"),
    ],
)
def test_a_store_dolma_cannot_reach_is_said_with_what_to_do_instead(options, why):
    remote = dolma.mix_stream("s", ["s3://corpus/ds/documents/a.jsonl"], "w", "/mix", [])
    text = dolma.mix_yaml({"streams": [remote]}, options)
    assert "# WARNING: dolma 1.2.1 cannot reach this store as configured: " in text
    assert why in text and "(corpus." in text  # the bucket host name dolma would ask for
    assert "virtual-host endpoint" in text and "mix from a" in text and "local copy" in text
    assert yaml.safe_load(text) == {"streams": [remote]}


@pytest.mark.parametrize(
    "endpoint",
    [None, "http://127.0.0.1:9000", "http://localhost:5000", "https://s3.us-east-1.amazonaws.com",
     "https://acct.r2.cloudflarestorage.com"],
)  # fmt: skip
def test_stores_dolma_reaches_get_no_warning(endpoint):
    remote = dolma.mix_stream("s", ["s3://b/ds/documents/a.jsonl"], "w", "/mix", [])
    text = dolma.mix_yaml({"streams": [remote]}, StorageOptions(endpoint_url=endpoint))
    assert "WARNING" not in text


def test_mix_config_refuses_attributes_where_dolma_does_not_look(tmp_path):
    _found, run_dir = dolma_run(tmp_path, uri=str(tmp_path / "elsewhere"))
    label(run_dir)
    with pytest.raises(ConfigError, match="dolma mix looks for the attributes of"):
        dolma.mix_config(run_dir, [dolma.Selection.parse("topic=a")], "out")


def test_export_needs_output_dolma_on_and_says_how(tmp_path):
    _found, run_dir = dolma_run(tmp_path)
    cfg = _found["cfg"]
    cfg["output"].pop("dolma")
    prepare_run(cfg, main_process=True, dryrun=True)
    with pytest.raises(ConfigError, match="output.dolma is off.*run `snakemake -n`"):
        dolma.export(run_dir, progress=False)
