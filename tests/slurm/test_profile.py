"""The profile as the plugin sees it: merging, $VARS, precedence, and no site names."""

from pathlib import Path

import pytest
import yaml

from shardwise.errors import ConfigError
from shardwise.slurm import profile

REPO = Path(__file__).resolve().parents[2]


def _profile(tmp_path, name, data):
    d = tmp_path / name
    d.mkdir()
    (d / "config.yaml").write_text(yaml.safe_dump(data))
    return d


def test_later_profiles_replace_earlier_ones_per_top_level_key(tmp_path):
    a = _profile(tmp_path, "a", {"jobs": 5, "default-resources": {"x": 1, "y": 2}, "retries": 3})
    b = _profile(tmp_path, "b", {"jobs": 7, "default-resources": {"x": 9}})
    assert profile.load([a, b]) == {"jobs": 7, "default-resources": {"x": 9}, "retries": 3}


def test_a_directory_without_config_yaml_is_refused_naming_it(tmp_path):
    with pytest.raises(ConfigError, match="no config.yaml"):
        profile.load([tmp_path])


def test_unset_variables_stay_literal_as_snakemake_leaves_them():
    env = {"SET": "acct"}
    assert profile.expand("'${SET}' '${UNSET}'", env) == "'acct' '${UNSET}'"
    assert profile.resource_value("'${UNSET}'", env) == "${UNSET}"
    assert profile.unset_variables("${UNSET}") == ["UNSET"]


def test_site_values_come_from_env_vars_only_when_set():
    env = {"SHARDWISE_SLURM_PARTITION": "gpu-a,gpu-b", "SHARDWISE_SLURM_QOS": " "}
    assert profile.site_resources(env) == {"slurm_partition": "gpu-a,gpu-b"}
    assert profile.site_resources({}) == {}


def test_set_resources_beat_env_vars_which_beat_default_resources():
    merged = {
        "executor": "shardwise",
        "default-resources": {"slurm_partition": "'d'", "constraint": "'dc'", "qos": "'dq'"},
        "set-resources": {"classify": {"slurm_partition": "'s'"}},
    }
    env = {"SHARDWISE_SLURM_PARTITION": "e", "SHARDWISE_SLURM_CONSTRAINT": "ec"}
    req = profile.view(merged, {}, env)
    assert (req.partitions, req.partition_source) == (
        ("s",),
        "set-resources classify.slurm_partition",
    )
    assert (req.constraint, req.qos) == ("ec", "dq")
    req = profile.view({**merged, "shardwise-qos": "plugin"}, {}, env)
    assert req.qos == "plugin"


def test_the_production_profile_names_no_site_and_works_once_the_account_is_set():
    prod = profile.load([REPO / "profiles" / "slurm"])
    req = profile.view(prod, {}, {"SHARDWISE_SLURM_ACCOUNT": "acct"})
    assert (req.partitions, req.exclude, req.constraint, req.qos) == ((), (), None, None)
    assert (req.account, req.gpus, req.group_components, req.status_command) == (
        "acct",
        1,
        4,
        "squeue",
    )
    text = (REPO / "profiles" / "slurm" / "config.yaml").read_text()
    for site_name in ("ice-gpu", "coe-gpu", "gpu-bad01", "fakegpu"):
        assert site_name not in text


def test_the_reference_site_overlay_carries_the_reference_site_names():
    merged = profile.load([REPO / "profiles" / "slurm", REPO / "profiles/sites/reference"])
    req = profile.view(merged, {}, {"SHARDWISE_SLURM_ACCOUNT": "acct"})
    assert req.partitions == ("ice-gpu", "coe-gpu", "ice-bw-gpu")
    assert (req.exclude, req.jobs, req.account) == (("gpu-bad01",), 450, "acct")


def test_feature_names_of_constraint_expressions():
    assert profile.feature_names("A100|H100") == ["A100", "H100"]
    assert profile.feature_names("[rack1*2&rack2*4]") == ["rack1", "rack2"]
    assert profile.constraint_is_or("A100|H100") and not profile.constraint_is_or("a&b")


def test_an_overlay_is_the_header_then_the_keys():
    assert profile.overlay_text({"jobs": 9}, "# why") == "# why\n\njobs: 9\n"


@pytest.mark.parametrize("overlay", [None, "sites/reference"])
def test_the_classify_jobs_threads_are_its_cpus(overlay):
    """Snakemake exports OMP_NUM_THREADS = threads: torch's thread pool should fill the
    CPUs the job asks for, no more, no fewer."""
    dirs = [REPO / "profiles" / "slurm"] + ([REPO / "profiles" / overlay] if overlay else [])
    merged = profile.load(dirs)
    cpus = merged["set-resources"]["classify"]["cpus_per_task"]
    assert merged["set-threads"]["classify"] == cpus == 6
