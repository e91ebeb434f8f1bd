"""shardwise's executor plugin against the real interface classes: a renamed method or
attribute of Snakemake's executor interface or of the SLURM plugin fails here, fast, not
as a job keeper that silently never runs on a cluster."""

import asyncio
import dataclasses
import inspect
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
import snakemake_executor_plugin_slurm as slurm_plugin
from e2e import minimal_config
from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

import snakemake_executor_plugin_shardwise as plugin
from shardwise.config import validate
from shardwise.runtime import host, versions


def test_snakemake_finds_the_plugin_as_the_slurm_executor_under_its_own_name():
    found = ExecutorPluginRegistry().get_plugin("shardwise")
    assert found.executor is plugin.Executor
    assert issubclass(plugin.Executor, slurm_plugin.Executor)
    assert found.common_settings is slurm_plugin.common_settings
    mine = {f.name for f in plugin.ExecutorSettings.__dataclass_fields__.values()}
    theirs = {f.name for f in slurm_plugin.ExecutorSettings.__dataclass_fields__.values()}
    assert mine == theirs  # every option of the SLURM plugin, as --shardwise-<name>
    assert found.cli_prefix == host.PLUGIN_NAME == "shardwise"


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("check_active_jobs", ["self", "active_jobs"]),
        ("report_job_success", ["self", "job_info"]),
        ("report_job_error", ["self", "job_info", "msg", "kwargs"]),
    ],
)
def test_the_overridden_methods_are_the_interface_s_own(name, params):
    for cls in (RemoteExecutor, slurm_plugin.Executor, plugin.Executor):
        assert list(inspect.signature(getattr(cls, name)).parameters) == params, cls
    assert inspect.isasyncgenfunction(plugin.Executor.check_active_jobs)


def test_the_attributes_the_keeper_reads_are_public_interface_attributes():
    prop = RemoteExecutor.next_seconds_between_status_checks
    assert isinstance(prop, property) and prop.fset is not None
    init = inspect.getsource(RemoteExecutor.__init__)
    for attribute in ("self.active_jobs = ", "self.lock = ", "self.wait_thread.start()"):
        assert attribute in init  # the keeper's ExecutorJobs exists before the thread starts


def info(job_id):
    return SimpleNamespace(external_jobid=job_id, job=None)


def test_a_status_round_carries_the_keeper_s_word_and_its_wait_cap(monkeypatch):
    executor = plugin.Executor.__new__(plugin.Executor)  # no workflow: one round, by hand
    executor.shardwise_jobs = host.ExecutorJobs(executor)
    executor.active_jobs, executor.lock = [], threading.Lock()
    reported = []

    def success(_self, job_info):
        reported.append(("ok", job_info.external_jobid))

    def error(_self, job_info, msg=None, **_kwargs):
        reported.append(("error", job_info.external_jobid, msg))

    # Snakemake's own bookkeeping of a reported job (it needs a running workflow)
    monkeypatch.setattr(RemoteExecutor, "report_job_success", success)
    monkeypatch.setattr(RemoteExecutor, "report_job_error", error)
    running, finished, dropped, ended = info("1"), info("2"), info("3"), info("4")

    async def plugin_round(self, active_jobs):  # the SLURM plugin's round (squeue)
        self.report_job_success(finished)
        self.next_seconds_between_status_checks = 180  # nothing new: it backs off
        for job in (running, ended):
            yield job  # `dropped` neither yielded nor reported (a failed status query)

    monkeypatch.setattr(slurm_plugin.Executor, "check_active_jobs", plugin_round)
    jobs = executor.shardwise_jobs
    jobs.known = {"4": ended}
    assert jobs.end("4", done=False, why="was preempted and could not be requeued")
    jobs.cap = 2.0

    async def one_round():
        return [i async for i in executor.check_active_jobs([running, finished, dropped, ended])]

    still = asyncio.run(one_round())
    assert still == [running, dropped]  # the dropped job is checked again next round
    assert reported == [
        ("ok", "2"),
        ("error", "4", "SLURM job 4 was preempted and could not be requeued. "),
    ]
    assert executor.next_seconds_between_status_checks == 2.0  # the keeper's watch_seconds


def test_untested_versions_are_one_line_naming_each():
    assert versions.untested(lambda name: versions.TESTED[name]) == []
    got = {**versions.TESTED, "snakemake-executor-plugin-slurm": "2.9.0"}
    got["snakemake-interface-common"] = None
    (line,) = versions.untested(got.get)
    assert line.startswith(
        "shardwise: untested versions: snakemake-executor-plugin-slurm 2.9.0 (tested: 2.8.0), "
        "snakemake-interface-common missing (tested: 1.23.0); "
    )
    assert "pip install snakemake==9.27.1 " in line


def test_the_installed_versions_are_the_tested_ones():
    assert versions.untested() == []  # pyproject.toml pins exactly these


def test_without_shardwise_s_executor_the_keeper_says_it_is_off():
    assert host.keeper_off_line("slurm") == (
        "shardwise: the job keeper is off: this run's executor is 'slurm', not 'shardwise' "
        "(profiles/slurm sets `executor: shardwise`): a preempted, held or vanished job may be "
        "waited for forever (docs/slurm.md, The job keeper)"
    )


def _profile(tmp_path, text: str) -> str:
    (tmp_path / "p").mkdir(exist_ok=True)
    (tmp_path / "p" / "config.yaml").write_text(text)
    return str(tmp_path / "p")


def test_the_slurm_plugins_spelling_is_read_with_the_same_meaning(tmp_path, capsys):
    """``slurm-status-command`` in a profile under ``executor: shardwise`` (what users'
    profiles carry) sets the same setting, said in one line; the shardwise spelling wins
    nothing it does not give."""
    text = "executor: shardwise\nslurm-status-command: squeue\n"
    text += "slurm-init-seconds-before-status-checks: 5\nshardwise-requeue: true\n"
    profile = _profile(tmp_path, text)
    settings = plugin.ExecutorSettings()
    plugin.read_slurm_spelling(settings, ["--profile", profile, "-n"])
    assert settings.status_command == "squeue" and settings.init_seconds_before_status_checks == 5
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("shardwise: read slurm-init-seconds-before-status-checks: 5, ")
    assert "slurm-status-command: squeue with the same meaning as its shardwise-* spell" in line


def test_both_spellings_with_different_values_stop_the_run_naming_both(tmp_path):
    profile = _profile(tmp_path, "slurm-status-command: sacct\nshardwise-status-command: squeue\n")
    said = r"slurm-status-command: 'sacct' and shardwise-status-command: 'squeue'.*keep the "
    with pytest.raises(WorkflowError, match=said + r"shardwise-\* spelling"):
        plugin.read_slurm_spelling(plugin.ExecutorSettings(), ["--profile", profile])


def test_no_slurm_spelling_reads_nothing_and_says_nothing(tmp_path, capsys):
    settings = plugin.ExecutorSettings()
    before = dataclasses.asdict(settings)
    plugin.read_slurm_spelling(settings, ["--profile", _profile(tmp_path, "jobs: 2\n")])
    assert dataclasses.asdict(settings) == before and capsys.readouterr().err == ""


def test_the_executor_hosts_the_runtime_through_its_real_init(tmp_path, monkeypatch):
    """The seam: the real ``Executor.__init__`` (the SLURM executor's own stubbed: no
    cluster) finds the Snakefile's ``RUNTIME`` and hosts it: the keeper starts on its jobs
    at once, and the executor's ``shutdown()`` stops it. Remove the hosting and this fails."""
    monkeypatch.setattr(slurm_plugin.Executor, "__init__", lambda self, workflow, logger: None)
    monkeypatch.setattr(slurm_plugin.Executor, "shutdown", lambda self: None)
    monkeypatch.setattr(plugin, "read_slurm_spelling", lambda settings: None)
    config = validate(minimal_config(tmp_path))  # a valid config, its defaults filled
    run = SimpleNamespace(run_dir=tmp_path / "run")
    workflow = SimpleNamespace(
        executor_settings=plugin.ExecutorSettings(),
        executor_plugin=SimpleNamespace(name="shardwise"),
        is_main_process=False,  # no failed-job hook at parse time (not what is tested)
        dryrun=False,
        output_settings=None,
        globals={},
    )
    runtime = host.Runtime(workflow, config, run)
    runtime.keeping.main_process = True  # the top-level process's keeping, as it starts
    workflow.globals[host.RUNTIME_NAME] = runtime
    executor = plugin.Executor(workflow, logger=None)
    assert isinstance(executor.shardwise_jobs, host.ExecutorJobs)
    keeper = runtime.keeping.keeper
    assert keeper is not None and keeper.jobs is executor.shardwise_jobs
    assert not keeper.stop.is_set()
    executor.shutdown()
    assert keeper.stop.is_set()


def test_the_keeper_off_line_reaches_stderr_on_slurm_without_this_executor(tmp_path, capsys):
    workflow = SimpleNamespace(
        executor_plugin=SimpleNamespace(name="slurm"), dryrun=False, output_settings=None
    )
    keeping = host.JobKeeping({}, SimpleNamespace(run_dir=tmp_path), main_process=True)
    assert keeping.start(workflow, None) is None
    err = capsys.readouterr().err
    assert host.keeper_off_line("slurm") in err.splitlines()


def test_importing_the_plugin_loads_no_shardwise_module():
    """Snakemake imports every installed executor plugin at every start, job steps too."""
    code = (
        "import sys, snakemake_executor_plugin_shardwise; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'shardwise'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
