import json
from pathlib import Path

import pytest
import yaml

from shardwise.config import Settings, inert_settings, load_yaml, validate
from shardwise.errors import ConfigError
from shardwise.run.context import RunSettings


def base():
    return {
        "run_dir": "run",
        "input": {"uri": "corpus"},
        "output": {"uri": "labels"},
        "sharding": {"total_shards": 4},
        "classifiers": [{"name": "topic", "model": "m", "input": "url_text"}],
    }


def test_defaults_are_filled_in():
    cfg = validate(base())
    assert cfg["input"]["format"] == "auto"
    assert cfg["input"]["files_per_task"] == 1
    assert cfg["input"]["category_regex"] == "^([^/]+/[^/]+)/"
    assert cfg["sharding"]["minimum_shard_index"] == 0
    assert cfg["inference"]["max_length"] == 8192
    assert cfg["resources"]["classify"]["gpu"] == 0
    assert cfg["walltime"]["safety_factor"] == 2


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda c: c.update(bogus=1), "Additional properties are not allowed \\('bogus'"),
        (lambda c: c["input"].update(colour="red"), "config input: Additional properties"),
        (lambda c: c["sharding"].update(total_shards=0), "config sharding.total_shards"),
        (lambda c: c["sharding"].update(total_shards=True), "sharding.total_shards"),
        (lambda c: c["sharding"].update(total_shards=2.5), "sharding.total_shards"),
        (lambda c: c["sharding"].update(total_shards=3.0), "got 3.0"),
        (lambda c: c["input"].update(format="csv"), "config input.format: 'csv' is not one of"),
        (lambda c: c["classifiers"][0].update(input="html"), "classifiers.0.input"),
        (lambda c: c["classifiers"].append(dict(c["classifiers"][0])), "names must be unique"),
        (lambda c: c.update(storage={"secret_access_key": "x"}), "storage"),
        (lambda c: c.pop("run_dir"), "'run_dir' is a required property"),
        # a margin of 5 logits would re-run nearly every document in fp32, silently
        (
            lambda c: c.update(inference={"recheck_margin": 5}),
            "config inference.recheck_margin: 5 is not allowed: .auto. was expected; or 5 is "
            "greater than the maximum of 1",
        ),
        (lambda c: c.update(failures={"stop_after": -1}), "config failures.stop_after"),
        (lambda c: c["input"].update(sample_files=-1), "config input.sample_files"),
        (
            lambda c: c["input"].update(category_regex="(["),
            r"config input.category_regex: '\(\[' is not a valid regular expression "
            r"\(unterminated character set at position 1\); fix it, or drop the key",
        ),
        (lambda c: c.update(inference={"compile": "yes"}), "config inference.compile: 'yes'"),
        (
            lambda c: c.update(inference={"dtype": "float16", "device": "cpu"}),
            r"config inference.dtype: 'float16' with inference.device 'cpu': .* use dtype auto",
        ),
    ],
)
def test_bad_config_names_the_key(mutate, match):
    cfg = base()
    mutate(cfg)
    with pytest.raises(ConfigError, match=match):
        validate(cfg)


def test_secret_like_storage_keys_point_to_the_environment():
    from shardwise.config import StorageOptions

    with pytest.raises(ConfigError, match="AWS_ACCESS_KEY_ID"):
        StorageOptions.from_config({"aws_secret": "x"})


def test_settings_job_settings_hold_no_secrets_and_reader_fields():
    s = Settings.from_config(base())
    js = json.loads(RunSettings.of(s).to_json())
    assert js["input"] == {
        "format": "auto",
        "id_field": "id",
        "text_field": "text",
        "url_field": "url",
    }
    assert js["inference"]["max_length"] == 8192


def test_load_yaml_is_safe(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("!!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(path)
    path.write_text("- a list\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_yaml(path)


def test_repo_configs_validate():
    for name in ("config/config.yaml", "config/weborganizer.yaml"):
        with open(name) as fh:
            validate(yaml.safe_load(fh))


def test_settings_a_switch_leaves_off_are_named_filled_in_or_not():
    """The schema's ``enabled`` switches: a block that sets more than its defaults while
    off is named, key by key; the same block on, or at its defaults, is not."""
    cfg = base()
    cfg["output"]["dolma"] = {"name": "mylabels", "uri": "attrs"}
    named = "config output.dolma.name, output.dolma.uri set, but output.dolma.enabled is "
    named += "false: they change nothing; set output.dolma.enabled: true to use them, or "
    assert Settings.from_config(cfg).inert == (named + "remove them",)
    assert inert_settings(validate(cfg)) == inert_settings(cfg)  # Snakemake fills defaults
    cfg["output"]["dolma"] = {"name": "weborganizer", "enabled": False}
    assert inert_settings(validate(cfg)) == ()
    cfg["output"]["dolma"] = {"name": "mylabels", "uri": "attrs", "enabled": True}
    assert Settings.from_config(cfg).inert == ()


def test_the_real_config_sets_what_a_dolma_campaign_needs_and_its_header_runs_as_written():
    """config/weborganizer.yaml: Dolma attributes where dolma mix looks, token counts from
    the start (pinned: adding them later means a new output), and the commands a SLURM
    run needs: the account, the site overlay `cluster check` writes, the profiles (#48)."""
    path = Path("config/weborganizer.yaml")
    settings = Settings.from_config(yaml.safe_load(path.read_text()))
    assert settings.dolma is not None and settings.count_tokenizer
    assert settings.dolma.uri.endswith("/attributes/weborganizer") and not settings.inert
    header = [ln.removeprefix("#").strip() for ln in path.read_text().splitlines() if ln[:1] == "#"]
    run = "snakemake --profile profiles/slurm --profile profiles/site --configfile " + str(path)
    assert run in header
    assert "export SHARDWISE_SLURM_ACCOUNT=<your account>       # sacctmgr -s list user $USER" in (
        header
    )
    check = next(ln for ln in header if ln.startswith("shardwise cluster check"))
    assert check == f"shardwise cluster check --configfile {path} --write-profile profiles/site"
    assert "Decide domains.tokenizer before the first file is labelled" in " ".join(header)


def test_the_schema_defines_each_key_once():
    """YAML keeps the last of two equal keys without a word: a second definition could
    silently replace the first's type or default."""

    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader, node):
        keys = [loader.construct_object(k) for k, _ in node.value]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        assert repeated == [], f"line {node.start_mark.line + 1}: {repeated} defined twice"
        return loader.construct_mapping(node)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    schema = Path(__file__).resolve().parents[1] / "config" / "schema.yaml"
    yaml.load(schema.read_text(), Loader=Strict)


@pytest.mark.parametrize(("written", "meant"), [("on", "on"), ("off", "off"), ("auto", "auto")])
def test_inference_compile_on_and_off_read_as_yaml_writes_them(tmp_path, written, meant):
    """A bare ``on``/``off`` is a boolean to YAML 1.1: it means the word."""
    text = yaml.safe_dump(base()) + f"inference: {{compile: {written}}}\n"
    (tmp_path / "c.yaml").write_text(text)
    cfg = validate(load_yaml(tmp_path / "c.yaml"))
    assert cfg["inference"]["compile"] == meant
    assert Settings.from_config(cfg).inference.compile == meant
