"""A campaign site's planning on a store that cannot keep leases: refused in one line
that names ``campaign.site`` and the fix, in a dry run (no request made) as in a run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from e2e import minimal_config
from inproc import s3_run_config

from shardwise.errors import ConfigError, RunMismatchError
from shardwise.planner.prepare import prepare_run
from shardwise.run import runjson
from shardwise.store.location import Location


@pytest.mark.parametrize("dryrun", [True, False], ids=["dry run", "run"])
def test_a_local_output_is_refused_for_a_campaign_naming_the_fix(tmp_path: Path, dryrun) -> None:
    (tmp_path / "a.jsonl").write_text('{"id": "1", "text": "hello"}\n')
    cfg = minimal_config(tmp_path, campaign={"site": "a"})
    with pytest.raises(ConfigError) as refused:
        prepare_run(cfg, main_process=True, dryrun=dryrun)
    said = str(refused.value)
    assert said.startswith("config campaign.site 'a': the output store ")
    assert "is not an S3-compatible store" in said and "or drop campaign.site" in said
    assert not (Path(cfg["run_dir"]) / "campaign.json").exists()


@pytest.mark.s3
def test_sites_with_their_models_elsewhere_never_rewrite_the_campaigns_pin(
    tmp_path: Path, s3
) -> None:
    """Site b's models are copies at other paths (the same content): its run directory's
    run.json names its own, the bucket's keeps site a's, planning again writes neither."""
    cfg_a, _ = s3_run_config(tmp_path / "a", s3)
    cfg_a["campaign"] = {"site": "a", "lease_seconds": 60}
    prepare_run(cfg_a, main_process=True, dryrun=False)
    labels = Location(s3.url("labels"), s3.options())
    pinned = labels.read_bytes(runjson.RUN_JSON)
    cfg_b, _ = s3_run_config(tmp_path / "b", s3)
    cfg_b["campaign"] = {"site": "b", "lease_seconds": 60}
    for c in cfg_b["classifiers"]:
        copy = tmp_path / "b-models" / c["name"]
        shutil.copytree(c["model"], copy)
        c["model"] = str(copy)

    def run_json_puts() -> int:
        log = s3.server.log(s3.name)
        return sum(r.method == "PUT" and r.key.endswith(runjson.RUN_JSON) for r in log)

    puts = run_json_puts()
    for _ in range(2):
        info = prepare_run(cfg_b, main_process=True, dryrun=False)
        assert not any("now names" in m for m in info.messages), info.messages  # nothing renamed
    assert labels.read_bytes(runjson.RUN_JSON) == pinned  # site a's paths, untouched
    assert run_json_puts() == puts
    local = json.loads((Path(cfg_b["run_dir"]) / "run.json").read_text())
    assert [c["model"] for c in local["classifiers"]] == [c["model"] for c in cfg_b["classifiers"]]


@pytest.mark.s3
def test_a_joining_site_with_other_settings_is_told_to_match_the_pin_not_to_repin(
    tmp_path: Path, s3
) -> None:
    cfg_a, _ = s3_run_config(tmp_path / "a", s3)
    cfg_a["campaign"] = {"site": "a", "lease_seconds": 60}
    prepare_run(cfg_a, main_process=True, dryrun=False)
    cfg_b, _ = s3_run_config(tmp_path / "b", s3, total_shards=3)  # a's pins 2
    cfg_b["campaign"] = {"site": "b", "lease_seconds": 60}
    with pytest.raises(RunMismatchError) as refused:
        prepare_run(cfg_b, main_process=True, dryrun=False)
    said = str(refused.value)
    assert "total_shards" in said and "--repin" not in said, said
    assert "config campaign.site 'b': this output is a campaign's, pinned by the site" in said
