"""When this job started, by the processes' own clocks: no call to the controller.

A shard job's start-up (Snakemake's job step parsing the Snakefile, the package's import,
the models' check and load, the self-checks, a compile) is part of what a job needs
before its first file, so the walltime fit's floor counts it (``planner/walltime.py``).
Under SLURM the job step's processes descend from ``slurmstepd``: the earliest start
among this process's ancestors below it is when the step began. Elsewhere (the local
executor) this process's own start is the job's. Linux's ``/proc`` holds both; where it
is missing, :func:`started_at` says None and nothing is measured.
"""

import os
from pathlib import Path

#: The SLURM daemon a job step's processes descend from (its ``comm``).
STEPD = "slurmstepd"


def _stat(pid: int, proc: Path) -> tuple[str, int, int] | None:
    """(comm, parent pid, start in clock ticks after boot) of ``pid``; None if gone."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    rest = text[text.rindex(")") + 2 :].split()  # from field 3 (state) on
    return comm, int(rest[1]), int(rest[19])  # fields 4 (ppid) and 22 (starttime)


def _boot_time(proc: Path) -> float | None:
    """POSIX seconds of the boot (``/proc/stat``'s ``btime``)."""
    try:
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def started_at(pid: int | None = None, *, proc: Path = Path("/proc")) -> float | None:
    """POSIX seconds at which this job began: under SLURM (``SLURM_JOB_ID`` set) the
    earliest start among ``pid``'s ancestors below ``slurmstepd``, else ``pid``'s own
    start (``pid``: this process). None where ``/proc`` cannot say."""
    pid = os.getpid() if pid is None else pid
    boot, first = _boot_time(proc), _stat(pid, proc)
    if boot is None or first is None:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    _, parent, start = first
    if os.environ.get("SLURM_JOB_ID"):
        seen = {pid}
        while parent > 1 and parent not in seen and (up := _stat(parent, proc)) is not None:
            if up[0] == STEPD:
                break
            seen.add(parent)
            start, parent = min(start, up[2]), up[1]
    return boot + start / ticks
