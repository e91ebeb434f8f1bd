"""What a launcher job is: the run it drives (read from the snakemake arguments' config)
and the ``sbatch`` options every generation submits. Values in, values out."""

import shlex
from collections.abc import Sequence
from pathlib import Path

from shardwise.config import load_yaml
from shardwise.errors import ConfigError
from shardwise.run.launch import Launch, log_path

#: The Snakefile's own config when no ``--configfile`` is given (relative to the workdir).
DEFAULT_CONFIG = Path("config") / "config.yaml"
#: Seconds a launcher needs at least before its walltime signal: start-up and planning.
MIN_RUN_SECONDS = 60


def option_values(args: Sequence[str], *names: str) -> list[str]:
    """Every value given to one of ``names`` in a snakemake command line (``--opt v1 v2``,
    ``--opt=v``), in order."""
    found: list[str] = []
    taking = False
    for arg in args:
        flag, eq, value = arg.partition("=")
        if flag in names and eq:
            found.append(value)
            taking = False
        elif arg in names:
            taking = True
        elif arg.startswith("-"):
            taking = False
        elif taking:
            found.append(arg)
    return found


def run_dir_of(args: Sequence[str], workdir: Path) -> Path:
    """The run directory the snakemake arguments drive: ``run_dir`` of the last config
    file that sets it (``--configfile``), relative to ``--directory`` or ``workdir``."""
    directory = option_values(args, "--directory", "-d")
    base = workdir / directory[-1] if directory else workdir
    configs = option_values(args, "--configfile", "--configfiles") or [str(DEFAULT_CONFIG)]
    run_dir = None
    for name in configs:
        path = Path(name) if Path(name).is_absolute() else workdir / name
        if not path.is_file():
            named = "the snakemake arguments name" if name != str(DEFAULT_CONFIG) else "the "
            named += "" if name != str(DEFAULT_CONFIG) else "Snakefile's default (no --configfile)"
            msg = f"{path}: no such config file ({named}); give snakemake's arguments after `--` "
            raise ConfigError(msg + "as you would to snakemake, or name the run with --run-dir")
        value = (load_yaml(path) or {}).get("run_dir")
        run_dir = value if value is not None else run_dir
    if not run_dir:
        msg = f"no run_dir in {', '.join(configs)}: the launcher drives one run; set run_dir "
        raise ConfigError(msg + "in the config, or give --run-dir")
    path = Path(str(run_dir))
    return (path if path.is_absolute() else base / path).resolve()


def check_times(time_minutes: int, stop_before_seconds: int) -> None:
    """Refuse a walltime that leaves Snakemake no time before the stop signal."""
    if time_minutes * 60 - stop_before_seconds < MIN_RUN_SECONDS:
        msg = f"--time {time_minutes} min with --stop-before {stop_before_seconds} s leaves "
        msg += f"Snakemake under {MIN_RUN_SECONDS} s per launcher; give a longer --time or a "
        raise ConfigError(msg + "shorter --stop-before")


#: Launchers kept queued behind the running one: whichever way it ends, even in its first
#: second, the next one starts while another still waits (``ops/launch/generation.py``).
SPARES = 2


def sbatch_options(launch: Launch, run_dir: Path) -> list[str]:
    """The options of one launcher job: the chain's name with ``singleton`` (one launcher
    per run at once: the queued ones wait for the running one to end, however it ends),
    never requeued (a queued one takes over instead), signalled ``stop_before_seconds``
    before its limit."""
    options = [
        f"--job-name={launch.name}",
        "--dependency=singleton",
        f"--time={launch.time_minutes}",
        f"--cpus-per-task={launch.cpus}",
        f"--mem={launch.mem_mb}",
        f"--signal=B:USR1@{launch.stop_before_seconds}",
        f"--output={log_path(run_dir)}",
        f"--chdir={launch.workdir}",
        "--no-requeue",
        f"--comment=shardwise-launch:{run_dir}",
    ]
    if launch.partition:
        options.append(f"--partition={launch.partition}")
    if launch.account:
        options.append(f"--account={launch.account}")
    return options


def job_command(launch: Launch, run_dir: Path) -> str:
    """What each launcher job runs: one generation of the chain (``exec``: the batch
    shell becomes the launcher, so that the walltime signal reaches it)."""
    argv = [launch.python, "-m", "shardwise.cli", "launch", "--generation", "--run-dir"]
    return "exec " + shlex.join([*argv, str(run_dir)])


def snakemake_command(launch: Launch) -> list[str]:
    """The workflow's main process, as the user gave it after ``--``."""
    return [launch.python, "-m", "snakemake", *launch.snakemake_args]
