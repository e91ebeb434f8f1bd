"""On SLURM, a failed shard's own reason is on the console, and a shared one stops the run.

The demo with a ``text_field`` typo that reaches the jobs (the planning sample is off,
as for a field only some files lack): the production profile (retries 3, keep-going,
group jobs of 2 shards) with the test cluster's overlay and ``--jobs 1``, so the jobs
run one after another. The group jobs fail for the typo (a failed member's error block
says why), none is retried, and once two shards have failed the run stops: of the 4
group jobs, the later ones are never submitted.
"""

from __future__ import annotations

import pytest
import slurmrun as sr
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    with slurm_cluster.exclusive():
        yield slurm_cluster


def test_the_console_names_the_reason_and_the_run_stops_early(cluster, tmp_path):
    configfile = sr.demo(tmp_path, total_shards=8)
    config = yaml.safe_load(configfile.read_text())
    config["input"].update(text_field="body", sample_files=0)
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    workdir = tmp_path / "work"
    workdir.mkdir()
    cmd = sr.snakemake(workdir, configfile, sr.PROFILE, sr.PROFILE_CI, extra=("--jobs", "1"))
    proc = sr.run(cmd, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    reason = "input.text_field 'body' is in no row of any file; fields found: id, text, url."
    assert f"failed: {reason}" in out, out[-6000:]
    assert "the same reason as shard" in out
    assert "shardwise: stopping the run: the first 2 shards to fail all failed" in out
    assert "shard(s) failed in this run, for 1 reason(s):" in out
    submitted = sr.sacct_of(workdir)
    assert 1 <= len(submitted) < 4, submitted  # 4 group jobs planned, retries 3
