"""Every verb's JSON: one object, keys sorted, indent 2, valid against docs/schemas/."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from inproc import label, plan_run

from shardwise.cli.main import main
from shardwise.run import plan, quarantine

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """One labelled in-process run with a quarantined file, shared by the verbs below."""
    root = tmp_path_factory.mktemp("json")
    run_dir = Path(plan_run(root)["run_dir"])
    quarantine.add(run_dir, plan.load(run_dir)["file"].to_pylist()[-1:], "unreadable scan")
    label(run_dir)
    return run_dir


@pytest.mark.parametrize(
    ("schema", "argv"),
    [
        ("coverage", ["coverage"]),
        ("domains", ["domains"]),
        ("domains", ["domains", "--by", "category", "--classifier", "topic"]),
        ("verify", ["verify", "--complete"]),
        ("quarantine", ["quarantine", "--list"]),
    ],
)
def test_a_verb_prints_one_sorted_object_its_schema_describes(run_dir, capsys, schema, argv):
    assert main([*argv, "--run-dir", str(run_dir), "--format", "json"]) == 0
    text = capsys.readouterr().out
    doc = json.loads(text)
    assert text == json.dumps(doc, indent=2, sort_keys=True) + "\n"
    jsonschema.validate(doc, json.loads((SCHEMAS / f"{schema}.schema.json").read_text()))
