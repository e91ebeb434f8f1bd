"""What a launcher job is: the run it drives, its sbatch options and command."""

import pytest
import yaml

from shardwise.errors import ConfigError
from shardwise.ops.launch import request
from shardwise.run.launch import Launch

REQUEST = Launch(name="shardwise-launch-abc", workdir="/w", python="/venv/bin/python",
                 snakemake_args=("--profile", "profiles/slurm", "--configfile", "run.yaml"),
                 time_minutes=480, stop_before_seconds=300, cpus=2, mem_mb=8000)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "values"),
    [
        (["--configfile", "a.yaml", "b.yaml", "--profile", "p"], ["a.yaml", "b.yaml"]),
        (["--configfile=a.yaml", "-n", "--configfiles", "c.yaml"], ["a.yaml", "c.yaml"]),
        (["--profile", "p", "-n"], []),
    ],
)
def test_option_values_reads_snakemake_s_spellings(args, values):
    assert request.option_values(args, "--configfile", "--configfiles") == values


def test_the_run_directory_is_the_last_config_s_run_dir_under_the_workdir(tmp_path):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"run_dir": "runs/a"}))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"inference": {}}))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"run_dir": str(tmp_path / "abs")}))
    assert request.run_dir_of(["--configfile", "a.yaml", "b.yaml"], tmp_path) == (
        tmp_path / "runs" / "a"
    )
    assert request.run_dir_of(["--configfile", "a.yaml", "c.yaml"], tmp_path) == tmp_path / "abs"
    sub = ["--directory", "work", "--configfile", "a.yaml"]
    assert request.run_dir_of(sub, tmp_path) == tmp_path / "work" / "runs" / "a"


def test_a_missing_config_or_run_dir_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.yaml: no such config file \(the snakemake"):
        request.run_dir_of(["--configfile", "nope.yaml"], tmp_path)
    with pytest.raises(ConfigError, match=r"config.yaml: no such config file \(the Snakefile's"):
        request.run_dir_of(["--profile", "p"], tmp_path)
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"inference": {}}))
    with pytest.raises(ConfigError, match="no run_dir in b.yaml.*or give --run-dir"):
        request.run_dir_of(["--configfile", "b.yaml"], tmp_path)


def test_a_walltime_that_leaves_snakemake_no_time_is_refused():
    request.check_times(3, 90)
    with pytest.raises(ConfigError, match="--time 2 min with --stop-before 90 s leaves"):
        request.check_times(2, 90)


def test_each_launcher_is_a_singleton_signalled_before_its_limit(tmp_path):
    first = request.sbatch_options(REQUEST, tmp_path)
    assert first == [
        "--job-name=shardwise-launch-abc", "--dependency=singleton", "--time=480",
        "--cpus-per-task=2", "--mem=8000", "--signal=B:USR1@300",
        f"--output={tmp_path}/logs/launch/%j.log", "--chdir=/w", "--no-requeue",
        f"--comment=shardwise-launch:{tmp_path}",
    ]  # fmt: skip
    site = Launch(**{**REQUEST.__dict__, "partition": "cpu", "account": "proj"})
    nxt = request.sbatch_options(site, tmp_path)
    assert "--dependency=singleton" in nxt  # waits for whichever launcher runs, however it ends
    assert nxt[-2:] == ["--partition=cpu", "--account=proj"]
    assert request.job_command(REQUEST, tmp_path) == (
        f"exec /venv/bin/python -m shardwise.cli launch --generation --run-dir {tmp_path}"
    )
    assert request.snakemake_command(REQUEST) == ["/venv/bin/python", "-m", "snakemake",
                                                  *REQUEST.snakemake_args]  # fmt: skip
