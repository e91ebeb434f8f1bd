"""Everything under ``claims/``: which live job works on a shard, and the workflow's jobs.

A job creates ``claims/<shard>.json`` (create-if-absent) and removes it however it ends;
one left by SIGKILL is stale once its holder is known gone (squeue, or the same local
process); one from another host without a job id counts as live. :func:`judge` is pure.
"""

import contextlib
import dataclasses
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

from shardwise.errors import RecordError, ShardClaimedError
from shardwise.run import markers
from shardwise.run.record import Fields, load_object
from shardwise.slurm import queries
from shardwise.store.atomic import create_exclusive, json_bytes, write_atomic

CLAIMS_DIR = "claims"
#: The workflow that plans this run: lets `cluster status` and `coverage` find its jobs.
WORKFLOW_JSON = "workflow.json"
#: Per-job cache of the shards a queued job carries (from its batch script).
JOBS_CACHE = "jobs.json"
#: SLURM's pseudo step ids (batch, extern, interactive): not an srun step of ours.
_PSEUDO_STEP = 4294967290


@dataclass(frozen=True, kw_only=True)
class Claim:
    """Who holds a shard: the JSON body of ``claims/<shard>.json``."""

    shard: int
    host: str
    pid: int
    started_at: str
    token: str
    slurm_job_id: str | None = None
    slurm_step_id: str | None = None
    process: str | None = None  # "<boot id>:<start ticks>" on Linux, to survive pid reuse

    def to_bytes(self) -> bytes:
        """The file content."""
        return json_bytes(asdict(self))

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "claim") -> Self:
        """Parse a claim file; RecordError (a ValueError) when it is not one."""
        claim = Fields.parse(data, where).into(cls)
        ids = ("slurm_job_id", "slurm_step_id", "process")
        return dataclasses.replace(claim, **{k: _opt(getattr(claim, k)) for k in ids})

    @property
    def step(self) -> str | None:
        """``<job>.<step>`` when the claim was made inside a real srun step."""
        step = self.slurm_step_id or ""
        if self.slurm_job_id and step.isdigit() and int(step) < _PSEUDO_STEP:
            return f"{self.slurm_job_id}.{step}"
        return None

    def holder(self) -> str:
        """``SLURM job 123 on node7`` / ``pid 42 on laptop``, for messages."""
        if self.slurm_job_id:
            return f"SLURM job {self.slurm_job_id} on {self.host}"
        return f"process {self.pid} on {self.host}"


@dataclass(frozen=True, kw_only=True)
class Submitter:
    """What identifies jobs of this workflow in the queue."""

    workdir: str
    snakefile: str
    configfiles: tuple[str, ...] = ()
    cluster: bool = False  # a cluster executor may be in use: ask squeue
    #: Jobs this invocation may run at once: ``--jobs`` on a cluster (one GPU each),
    #: ``--cores`` locally. What the coverage ETA divides by.
    parallel: int = 1
    host: str = ""
    pid: int = 0
    started_at: str = ""
    process: str | None = None  # the main process's identity (survives pid reuse)
    #: The SLURM job the main process ran in (``shardwise launch``, or a user's own
    #: launcher job): once that job has ended, its lock is cleared on any host.
    slurm_job_id: str | None = None

    @classmethod
    def of(cls, workflow: Any) -> Self:
        """From Snakemake's ``workflow`` at parse time (top-level process): the executor is
        not known yet, but ``--jobs`` (``resources.nodes``) is, and any cluster one needs it."""
        resources = getattr(workflow, "resource_settings", None)
        configfiles = getattr(getattr(workflow, "config_settings", None), "configfiles", None)
        nodes = getattr(resources, "nodes", None)
        parallel = nodes if nodes is not None else getattr(resources, "cores", None)
        return cls(
            workdir=str(Path.cwd()),
            snakefile=str(Path(str(workflow.main_snakefile)).resolve()),
            configfiles=tuple(str(Path(p).resolve()) for p in configfiles or ()),
            cluster=nodes is not None,
            parallel=parallel if isinstance(parallel, int) and parallel > 0 else 1,
            host=hostname(),
            pid=os.getpid(),
            started_at=markers.now(),
            process=process_identity(os.getpid()),
            slurm_job_id=os.environ.get("SLURM_JOB_ID") or None,
        )

    @classmethod
    def recorded(cls, run_dir: Path) -> Self | None:
        """The last top-level invocation's record (``claims/workflow.json``), if readable."""
        path = Path(run_dir) / CLAIMS_DIR / WORKFLOW_JSON
        try:
            return Fields.parse(path.read_bytes(), str(path)).into(cls)
        except (OSError, RecordError):
            return None

    def record(self, run_dir: Path) -> None:
        """Write ``claims/workflow.json`` (the main process, once per invocation)."""
        write_atomic(run_dir / CLAIMS_DIR / WORKFLOW_JSON, json_bytes(asdict(self)))


@dataclass(frozen=True)
class BatchScript:
    """What a queued job's batch script says (an entry of ``claims/jobs.json``): the
    snakefile, the configfiles and the shards of its ``--target-jobs``."""

    snakefile: str = ""
    configfiles: tuple[str, ...] = ()
    shards: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        configfiles, shards = list(self.configfiles), list(self.shards)
        return {"snakefile": self.snakefile, "configfiles": configfiles, "shards": shards}


def read_jobs_cache(run_dir: Path) -> dict[str, BatchScript]:
    """``claims/jobs.json``: per queued job (``<id>@<submit time>``), what its batch
    script said; empty when absent or unreadable (a cache: the scripts are read again)."""
    path = run_dir / CLAIMS_DIR / JOBS_CACHE
    try:
        data = load_object(path.read_bytes(), str(path))
    except (OSError, RecordError):
        return {}
    found = {}
    for key, entry in data.items():  # a damaged entry is a miss: its script is read again
        with contextlib.suppress(RecordError):
            if isinstance(entry, dict):
                found[key] = Fields(entry, f"{path} [{key}]").into(BatchScript)
    return found


def write_jobs_cache(run_dir: Path, cache: dict[str, BatchScript]) -> None:
    """Replace ``claims/jobs.json`` (a cache: on failure the next invocation reads the
    batch scripts again)."""
    with contextlib.suppress(OSError):
        body = {key: entry.to_json() for key, entry in cache.items()}
        write_atomic(
            run_dir / CLAIMS_DIR / JOBS_CACHE, (json.dumps(body, indent=1) + "\n").encode()
        )


def _opt(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def claim_path(run_dir: Path, shard: int) -> Path:
    """``<run_dir>/claims/<shard>.json``."""
    return run_dir / CLAIMS_DIR / f"{shard}.json"


def hostname() -> str:
    """This machine's name as claims record it."""
    return os.uname().nodename


def process_identity(pid: int) -> str | None:
    """``<boot id>:<start time in clock ticks>`` of a running process (Linux), else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return f"{boot}:{fields[19]}" if len(fields) > 19 else None


def for_this_process(shard: int) -> Claim:
    """The claim this process would make (SLURM ids from the environment, if any)."""
    pid, env = os.getpid(), os.environ
    return Claim(
        shard=shard,
        host=hostname(),
        pid=pid,
        started_at=markers.now(),
        token=secrets.token_hex(8),
        slurm_job_id=_opt(env.get("SLURM_JOB_ID")),
        slurm_step_id=_opt(env.get("SLURM_STEP_ID")),
        process=process_identity(pid),
    )


def read_claim(path: Path) -> Claim | None:
    """The claim at ``path``; None when it vanished or is unreadable."""
    try:
        return Claim.from_bytes(path.read_bytes(), str(path))
    except (OSError, ValueError):
        return None


def read_claims(run_dir: Path) -> dict[int, Claim]:
    """Every claim in the run directory (one listing; nothing when there is no claims/)."""
    numbers = markers.numbered(run_dir / CLAIMS_DIR, ".json")
    found = (read_claim(claim_path(run_dir, n)) for n in numbers)
    return {claim.shard: claim for claim in found if claim is not None}


@dataclass(frozen=True)
class Verdict:
    """Whether a claim's holder is alive; ``None`` when it cannot be told from here."""

    alive: bool | None
    why: str


def process_alive(pid: int, identity: str | None) -> bool:
    """Whether ``pid`` runs on this host and is the process ``identity`` describes."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    if _zombie(pid):
        return False  # it has exited; only its parent has not reaped it yet
    if identity is None:
        return True
    now = process_identity(pid)
    return now is None or now == identity


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits to be reaped (Linux ``/proc``; False elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] == "Z"


def judge(  # noqa: PLR0911 - one return per case of the module docstring
    claim: Claim,
    *,
    live_jobs: dict[str, str] | None,
    live_steps: set[str] | None = None,
    here: str | None = None,
) -> Verdict:
    """Is ``claim``'s holder alive? Pure, given what squeue said: ``live_jobs`` (job id ->
    state of unfinished jobs) and ``live_steps`` (``<job>.<step>``); None: not asked."""
    here = here or hostname()
    same_host = claim.host == here
    if claim.slurm_job_id:
        if live_jobs is None:
            if same_host:
                alive = process_alive(claim.pid, claim.process)
                return Verdict(alive, "process " + ("runs" if alive else "is gone"))
            return Verdict(None, f"squeue could not be asked about job {claim.slurm_job_id}")
        state = live_jobs.get(claim.slurm_job_id)
        if state is None:
            return Verdict(False, f"job {claim.slurm_job_id} has ended")
        if claim.step and live_steps is not None and claim.step not in live_steps:
            return Verdict(
                False, f"job {claim.slurm_job_id} is {state} but step {claim.step} ended"
            )
        if same_host and not process_alive(claim.pid, claim.process):
            return Verdict(False, f"job {claim.slurm_job_id} is {state} but its process is gone")
        return Verdict(True, f"job {claim.slurm_job_id} is {state}")
    if same_host:
        alive = process_alive(claim.pid, claim.process)
        return Verdict(alive, f"process {claim.pid} " + ("runs" if alive else "is gone"))
    return Verdict(None, f"process {claim.pid} runs on another host ({claim.host})")


def judge_now(claim: Claim) -> Verdict:
    """Judge one claim, asking squeue about its job only (the conflict path of a job)."""
    if not claim.slurm_job_id:
        return judge(claim, live_jobs=None)
    states = queries.job_states([claim.slurm_job_id], timeout=30)
    if not states.ok:
        return judge(claim, live_jobs=None)
    live = {j: s for j, s in (states.value or {}).items() if s in queries.LIVE_STATES}
    steps: set[str] | None = None
    if claim.step and claim.slurm_job_id in live:
        found = queries.steps(timeout=30)
        steps = found.value if found.ok else None
    return judge(claim, live_jobs=live, live_steps=steps)


def acquire(run_dir: Path, shard: int, *, tries: int = 3) -> Claim:
    """Claim ``shard`` for this process, taking over a stale claim; refuse a live one."""
    path = claim_path(run_dir, shard)
    mine = for_this_process(shard)
    for _ in range(tries):
        if create_exclusive(path, mine.to_bytes()):
            return mine
        other = read_claim(path)
        if other is None:
            continue  # released (or unreadable) between our create and our read
        if other.slurm_job_id and other.slurm_job_id == mine.slurm_job_id:
            alive = process_alive(other.pid, other.process) and other.host == mine.host
            verdict = Verdict(alive, "same SLURM job, " + ("process runs" if alive else "gone"))
        else:
            verdict = judge_now(other)
        if verdict.alive is not False:
            raise ShardClaimedError(_refusal(path, other, verdict))
        _remove_if_same(path, other)
    msg = f"{path}: could not claim shard {shard} after {tries} tries (other jobs race for it)"
    raise ShardClaimedError(msg)


def _refusal(path: Path, other: Claim, verdict: Verdict) -> str:
    tail = "it is still working on it"
    if verdict.alive is not True:
        tail = f"it cannot be checked from here ({verdict.why}); if that process is gone, "
        tail += f"delete {path} and run again"
    text = f"shard {other.shard} is claimed by {other.holder()} since {other.started_at} "
    return text + f"({path}); {tail}. This job stopped without touching any output."


def _remove_if_same(path: Path, stale: Claim) -> None:
    """Remove ``path`` if it still holds ``stale``: renamed aside first (atomic), and put
    back when what was renamed is another job's newer claim."""
    aside = path.with_name(f".{path.name}.stale-{secrets.token_hex(4)}")
    try:
        path.rename(aside)
    except FileNotFoundError:
        return
    moved = read_claim(aside)
    if moved is not None and moved.token != stale.token:
        with contextlib.suppress(FileExistsError, OSError):
            os.link(aside, path)
    with contextlib.suppress(OSError):
        aside.unlink()


def release(run_dir: Path, claim: Claim) -> None:
    """Remove our claim (only ours: a claim taken over by another job stays)."""
    path = claim_path(run_dir, claim.shard)
    current = read_claim(path)
    if current is not None and current.token == claim.token:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def held(run_dir: Path, shard: int) -> Iterator[Claim]:
    """Hold the shard's claim for the body of the ``with`` (released on any exit)."""
    claim = acquire(run_dir, shard)
    try:
        yield claim
    finally:
        release(run_dir, claim)
