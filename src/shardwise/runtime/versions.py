"""The versions of Snakemake and of the executor packages the runtime was tested with.

The job keeper, the walltime adaptation and the failed-job hook attach to Snakemake
through its executor interface (``snakemake-interface-executor-plugins``) and the SLURM
plugin's ``Executor``, which shardwise's executor plugin subclasses. pyproject.toml pins
each of them; another version (a site's own environment) may rename what they call, so a
run on SLURM starts with one line naming each untested version."""

from collections.abc import Callable
from importlib import metadata

#: The distributions and the versions the test suite ran with (pinned in pyproject.toml).
TESTED = {
    "snakemake": "9.27.1",
    "snakemake-executor-plugin-slurm": "2.8.0",
    "snakemake-executor-plugin-slurm-jobstep": "0.6.1",
    "snakemake-interface-executor-plugins": "9.4.0",
    "snakemake-interface-common": "1.23.0",
}


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def untested(version: Callable[[str], str | None] = _installed) -> list[str]:
    """One line when any of :data:`TESTED` is at another version (or missing); else none."""
    found = {name: version(name) for name in TESTED}
    off = [f"{name} {got or 'missing'} (tested: {TESTED[name]})"
           for name, got in found.items() if got != TESTED[name]]  # fmt: skip
    if not off:
        return []
    pins = " ".join(f"{name}=={v}" for name, v in TESTED.items())
    text = f"shardwise: untested versions: {', '.join(off)}; the job keeper and the walltime "
    text += "adaptation attach through their executor interface, which another version may "
    return [text + f"change: pip install {pins}"]
