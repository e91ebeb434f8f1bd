"""Snakemake's own lock, left by a main process that died, is cleared: no ``--unlock`` step.

A ``kill -9`` (a lost login node, the walltime of the job hosting the workflow) leaves
``.snakemake/locks/`` behind, and the next ``snakemake`` stops with ``LockException``
until someone runs ``--unlock``. The planner knows better: it holds the run directory's
own lock (so no other live main process plans this run), and ``claims/workflow.json``
names the main process that ran it last. When that process ran on this host and is
gone, or ran in a SLURM job that has ended (``shardwise launch``: the successor starts on
any node), the lock files that name this run's paths are its leftovers and are removed,
with one console line. A lock of a live process, of another host that cannot be checked,
or of another workflow in the same directory is never touched.
"""

import contextlib
from collections.abc import Callable
from pathlib import Path

from shardwise.run import claims
from shardwise.run.claims import Submitter
from shardwise.slurm import queries

#: Snakemake's lock directory under the working directory (its file persistence).
LOCKS = Path(".snakemake") / "locks"


def clear_stale(
    run_dir: Path,
    submitter: Submitter,
    recorded: Submitter | None,
    *,
    job_state: Callable[[str], str | None] | None = None,
) -> list[str]:
    """Remove the locks a dead main process of this run left; the notes to print. Called
    by the planner while it holds the run directory's lock. ``job_state`` (tests) says
    what SLURM says of a job: its state, "" when squeue no longer lists it, None when
    squeue does not answer."""
    ours = _locks_naming(Path(submitter.workdir), Path(run_dir))
    if not ours:
        return []
    if recorded is None:
        return [_advice("a process the run directory does not name")]
    who = f"pid {recorded.pid} on {recorded.host}, started {recorded.started_at}"
    gone = _gone(submitter, recorded, job_state or _job_state)
    if gone is None:
        return [_advice(f"{who}, which cannot be checked from here")]
    if not gone:
        return []  # a live process's lock: Snakemake refuses to start, as it should
    for path in ours:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    text = f"note: cleared Snakemake's lock ({len(ours)} file(s) in {LOCKS}) that the main "
    return [text + f"process of this run left when {gone} ({who}): no --unlock needed"]


def _gone(
    submitter: Submitter, recorded: Submitter, job_state: Callable[[str], str | None]
) -> str | None:
    """How the recorded main process is known gone ("" when it is alive); None when that
    cannot be told from here (another host, and no SLURM job that says so)."""
    job = recorded.slurm_job_id
    if job and job != submitter.slurm_job_id:
        state = job_state(job)
        # COMPLETING: the job's processes have ended (its epilog runs); a successor whose
        # dependency that satisfied may start before SLURM says COMPLETED
        if state is not None and (state not in queries.LIVE_STATES or state == "COMPLETING"):
            return f"its SLURM job {job} ended ({state or 'no longer listed'})"
    if recorded.host != submitter.host:
        return None
    if recorded.pid == submitter.pid or claims.process_alive(recorded.pid, recorded.process):
        return ""
    return "it died"


def _job_state(job_id: str) -> str | None:
    """SLURM's state of one job; "" once squeue no longer lists it; None: no answer."""
    answer = queries.job_states([job_id])
    return (answer.value or {}).get(job_id, "") if answer.ok else None


def _locks_naming(workdir: Path, run_dir: Path) -> list[Path]:
    """The lock files that name a path inside ``run_dir`` (Snakemake writes one per lock
    kind, listing every input or output file of the locked DAG, one per line)."""
    root = workdir / LOCKS
    try:
        files = sorted(p for p in root.iterdir() if p.name.endswith(".lock") and p.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return []
    inside = run_dir.resolve()
    found = []
    for path in files:
        try:
            lines = path.read_text("utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        if any(_under(workdir, line.strip(), inside) for line in lines if line.strip()):
            found.append(path)
    return found


def _under(workdir: Path, name: str, inside: Path) -> bool:
    p = Path(name)
    try:
        return (p if p.is_absolute() else workdir / p).resolve().is_relative_to(inside)
    except (OSError, ValueError):
        return False


def _advice(who: str) -> str:
    text = f"note: Snakemake's lock in {LOCKS} names this run's files and was left by {who}: "
    return text + "if that process is gone, run the same command with --unlock, then again"
