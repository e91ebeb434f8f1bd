"""A campaign site's planning on a store that cannot keep leases: refused in one line
that names ``campaign.site`` and the fix, in a dry run (no request made) as in a run."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e import minimal_config

from shardwise.errors import ConfigError
from shardwise.planner.prepare import prepare_run


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
