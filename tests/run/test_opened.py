"""The one door into a run directory: read once, the heavy parts on first use."""

from __future__ import annotations

import pytest
from inproc import label, plan_run

from shardwise.errors import InputError
from shardwise.run import plan
from shardwise.run.context import SETTINGS_JSON
from shardwise.run.opened import open_run


def test_a_run_opens_with_its_pins_settings_and_roots_and_reads_the_rest_when_asked(tmp_path):
    plan_run(tmp_path, total_shards=3)
    run_dir = tmp_path / "run"
    label(run_dir, [0])
    run = open_run(run_dir)
    assert run.meta.total_shards == 3 and run.settings is not None
    assert run.output.root == str(tmp_path / "labels") and run.fields.text == "text"
    assert not {"plan", "done", "quarantined"} & set(vars(run))  # nothing read yet
    assert run.plan.num_rows == plan.load(run_dir).num_rows
    assert run.plan is run.plan  # read once
    assert 0 in run.done.shards and run.quarantined == {}
    assert list(run.shards) == [0, 1, 2]


def test_a_run_without_settings_opens_for_views_and_is_refused_for_jobs(tmp_path):
    plan_run(tmp_path, total_shards=3)
    run_dir = tmp_path / "run"
    (run_dir / SETTINGS_JSON).unlink()
    view = open_run(run_dir, settings_required=False)
    assert view.settings is None and view.plan.num_rows > 0
    with pytest.raises(InputError, match=r"settings.json is missing: start the run with snakemake"):
        open_run(run_dir)
    with pytest.raises(InputError, match="settings.json is missing"):
        _ = view.fields
