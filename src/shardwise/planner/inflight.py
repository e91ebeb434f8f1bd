"""Shards that live jobs are already working on: adopted by a new invocation.

A main process that dies leaves its jobs running, and the next invocation would submit
their shards again. They are the live **claims**, and **the queue**'s plugin jobs of this
workflow, whose batch script (read once, cached) names this Snakefile, these config files
and the shards. A new invocation adopts the holders it can check (:func:`adoption`): it
waits for them and labels what they leave; those it cannot check are left out.
"""

import base64
import contextlib
import shlex
import shutil
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from shardwise.run import claims, markers, ranges
from shardwise.run.adoption import Adoption, Holder
from shardwise.run.claims import Submitter
from shardwise.slurm import queries

#: The rule whose jobs carry shards.
RULE = "classify"
#: Seconds the plan-time squeue may take before the run goes on without it.
SQUEUE_TIMEOUT = 30.0


@dataclass(frozen=True, kw_only=True)
class Flying:
    """One in-flight shard."""

    shard: int
    job_id: str | None  # SLURM job id; None for a local process
    state: str  # RUNNING, PENDING, ... or "running" for a local process
    since: str  # ISO time: claim start, job start, or job submission
    holder: str  # "SLURM job 12 on node3", "process 42 on laptop"
    certain: bool = True  # False: the holder could not be checked (counted as live)


@dataclass(frozen=True)
class InFlight:
    """The shards live jobs hold, and notes on what could not be checked."""

    shards: dict[int, Flying] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    stale_claims: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.shards)

    def jobs(self) -> dict[str, list[Flying]]:
        """In-flight shards by holder (SLURM job id, or ``pid@host``)."""
        out: dict[str, list[Flying]] = {}
        for f in sorted(self.shards.values(), key=lambda f: f.shard):
            out.setdefault(f.job_id or f.holder, []).append(f)
        return out

    def lines(self, *, notes: bool = True, planning: bool = True) -> list[str]:
        """The "in flight" block of the coverage printout (empty when nothing flies);
        ``planning``: printed by a new invocation, which adopts the holders it can check
        and leaves out the shards of those it cannot."""
        out: list[str] = []
        if not planning and self.shards:
            out.append(_head(self.shards, "live job(s)"))
        if planning and self.adoptable():
            head = _head(self.adoptable(), "live job(s) of an earlier invocation")
            out.append(f"{head}: adopted: this run waits for them (fitting their walltimes with "
                       "its own) and labels whatever they leave")  # fmt: skip
        if planning and self.left_out():
            head = _head(self.left_out(), "job(s) that cannot be checked from here")
            out.append(f"{head}: left out of this run; run snakemake again after they end to "
                       "pick up whatever they leave")  # fmt: skip
        for flying in self.jobs().values():
            first = flying[0]
            shards = ranges.compress([f.shard for f in flying])
            what = f"job {first.job_id}" if first.job_id else first.holder
            check = "" if first.certain else "  (cannot be checked from here)"
            line = f"  shards {shards:<12} {what:<22} {first.state:<10} since {first.since}"
            out.append(line + check)
        if notes:
            out += [f"note     {n}" for n in self.notes]
        return out

    def adoptable(self) -> dict[int, Flying]:
        """Shards whose holder can be checked from here: a restarted workflow waits for it."""
        return {s: f for s, f in self.shards.items() if f.certain}

    def left_out(self) -> dict[int, Flying]:
        """Shards whose holder cannot be checked (another host, squeue silent)."""
        return {s: f for s, f in self.shards.items() if not f.certain}

    def to_dict(self) -> list[dict[str, Any]]:
        """JSON form: one object per in-flight shard."""
        return [asdict(f) for f in sorted(self.shards.values(), key=lambda f: f.shard)]


def _head(shards: dict[int, Flying], holders: str) -> str:
    n = len({f.job_id or f.holder for f in shards.values()})
    return f"in flight {len(shards):,} shard(s) held by {n:,} {holders}"


def adoption(run_dir: Path, flight: InFlight, token: str) -> Adoption | None:
    """What a new invocation adopts: every holder it can check (a live SLURM job, a local
    process on this host), with the shards it holds; None when there is none."""
    holders = []
    for flying in InFlight(flight.adoptable()).jobs().values():
        shards = tuple(f.shard for f in flying)
        first = flying[0]
        if first.job_id:
            holders.append(Holder(shards=shards, job_id=first.job_id))
            continue
        claim = claims.read_claim(claims.claim_path(run_dir, first.shard))
        if claim is not None:
            holders.append(
                Holder(shards=shards, pid=claim.pid, host=claim.host, process=claim.process)
            )
    if not holders:
        return None
    return Adoption(at=markers.now(), token=token, holders=tuple(holders))


def local_time(iso: str) -> str:
    """An ISO time with an offset (claims are UTC) as local time, as SLURM prints times."""
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if when.tzinfo is not None:
        when = when.astimezone().replace(tzinfo=None)
    return when.isoformat(timespec="seconds")


def find(
    run_dir: Path,
    submitter: Submitter | None,
    *,
    done: Iterable[int] = (),
    queue: queries.Answer[list[queries.Job]] | None = None,
) -> InFlight:
    """Shards held by live claims or queued by an earlier invocation of this workflow
    (``queue``: squeue's answer when the caller has one; else asked only when needed)."""
    done = set(done)
    held = {s: c for s, c in claims.read_claims(run_dir).items() if s not in done}
    cluster = submitter is not None and submitter.cluster
    wants_queue = cluster or any(c.slurm_job_id for c in held.values())
    if queue is None and wants_queue and shutil.which("squeue") is not None:
        queue = queries.jobs(timeout=SQUEUE_TIMEOUT)
    notes: list[str] = []
    live_jobs: dict[str, str] | None = None
    if queue is not None:
        if queue.ok:
            live_jobs = {j.id: j.state for j in queue.value or ()}
        else:
            notes.append(f"squeue did not answer ({queue.problem}); claims are trusted as live")
    flying, stale = _claimed(held, live_jobs)
    if queue is not None and queue.ok and submitter is not None:
        queued = queued_shards(run_dir, submitter, queue.value or [])
        _add_queued(flying, queued, done)
    if stale:
        gone = f"shards {ranges.compress(stale)}"
        notes.append(f"{len(stale)} stale claim(s) ignored (their jobs are gone): {gone}")
    return InFlight(flying, tuple(notes), tuple(stale))


def _claimed(
    held: dict[int, claims.Claim], live_jobs: dict[str, str] | None
) -> tuple[dict[int, Flying], list[int]]:
    """The claimed shards whose holder may be alive (squeue's ``live_jobs`` and, for job
    steps, its steps: asked only when a claim names a step of a live job), and the stale."""
    steps: set[str] | None = None
    if live_jobs and any(c.step and c.slurm_job_id in live_jobs for c in held.values()):
        found = queries.steps(timeout=SQUEUE_TIMEOUT)
        steps = found.value if found.ok else None
    flying: dict[int, Flying] = {}
    stale: list[int] = []
    for shard, claim in sorted(held.items()):
        verdict = claims.judge(claim, live_jobs=live_jobs, live_steps=steps)
        if verdict.alive is False:
            stale.append(shard)
            continue
        flying[shard] = Flying(
            shard=shard,
            job_id=claim.slurm_job_id,
            state=(live_jobs or {}).get(claim.slurm_job_id or "", "running"),
            since=local_time(claim.started_at),
            holder=claim.holder(),
            certain=verdict.alive is True,
        )
    return flying, stale


def _add_queued(
    flying: dict[int, Flying], queued: dict[queries.Job, list[int]], done: set[int]
) -> None:
    """The shards queued jobs hold, unless done or already held by a claim."""
    for job, shards in queued.items():
        since = job.start_time if job.running and job.start_time else job.submit_time
        when = since.isoformat() if since else ""
        holder = f"SLURM job {job.id}" + (f" on {job.nodes}" if job.nodes else "")
        for shard in shards:
            if shard not in done and shard not in flying:
                flying[shard] = Flying(
                    shard=shard, job_id=job.id, state=job.state, since=when, holder=holder
                )


def candidate(job: queries.Job, submitter: Submitter) -> bool:
    """A live job submitted by the SLURM plugin from this workflow's directory."""
    live = job.state in queries.LIVE_STATES and job.comment.startswith("rule_")
    return live and _same_path(job.workdir, submitter.workdir)


def queued_shards(
    run_dir: Path, submitter: Submitter, jobs: list[queries.Job]
) -> dict[queries.Job, list[int]]:
    """Shards of each live job of this workflow, from its batch script (cached)."""
    picked = [j for j in jobs if candidate(j, submitter)]
    if not picked:
        return {}
    cache = claims.read_jobs_cache(run_dir)

    def key(job: queries.Job) -> str:
        return f"{job.id}@{job.submit_time.isoformat() if job.submit_time else ''}"

    missing = [j for j in picked if key(j) not in cache]
    if missing:
        with ThreadPoolExecutor(max_workers=4) as pool:
            scripts = list(pool.map(lambda j: queries.batch_script(j.id), missing))
        for job, script in zip(missing, scripts, strict=True):
            if script.ok:
                cache[key(job)] = parse_wrap(script.value or "")
    kept = {key(j): cache[key(j)] for j in picked if key(j) in cache}
    if kept != cache:
        claims.write_jobs_cache(run_dir, kept)
    out: dict[queries.Job, list[int]] = {}
    for job in picked:
        entry = kept.get(key(job))
        if entry and _same_workflow(entry, submitter):
            out[job] = list(entry.shards)
    return out


def parse_wrap(script: str) -> claims.BatchScript:
    """``--snakefile``, ``--configfiles`` and the shards of ``--target-jobs`` in a script."""
    for line in script.splitlines():
        if "--target-jobs" not in line:
            continue
        try:
            args = shlex.split(line)
        except ValueError:
            continue
        values: dict[str, list[str]] = {}
        current: str | None = None
        for arg in args:
            if arg.startswith("--"):
                current = arg
                values.setdefault(arg, [])
            elif current is not None:
                values[current].append(arg)
        shards = []
        for target in values.get("--target-jobs", []):
            rule, _, wildcards = target.partition(":")
            if rule != RULE:
                continue
            for item in wildcards.split(","):
                name, _, value = item.partition("=")
                if name == "shard" and value.isdigit():
                    shards.append(int(value))
        snakefile = (values.get("--snakefile") or [""])[0]
        configfiles = tuple(values.get("--configfiles", []))
        return claims.BatchScript(snakefile, configfiles, tuple(sorted(shards)))
    return claims.BatchScript()


def _same_workflow(entry: claims.BatchScript, submitter: Submitter) -> bool:
    if not entry.shards:
        return False
    if entry.snakefile and not _same_path(entry.snakefile, submitter.snakefile):
        return False
    theirs = {_resolved(p, submitter.workdir) for p in entry.configfiles}
    ours = {_resolved(p, submitter.workdir) for p in submitter.configfiles}
    return theirs == ours


def _resolved(path: str, workdir: str) -> str:
    p = Path(path)
    return str((p if p.is_absolute() else Path(workdir) / p).resolve())


def _same_path(a: str, b: str) -> bool:
    return bool(a and b) and (a == b or Path(a).resolve() == Path(b).resolve())


#: Snakemake's flags of outputs whose job started and never finished (file backend).
SNAKEMAKE_INCOMPLETE = Path(".snakemake") / "incomplete"


def clear_stale_incomplete(run_dir: Path, workdir: str) -> list[int]:
    """Drop Snakemake's "incomplete" flags of the run's shard markers: a SIGKILLed Snakemake
    leaves one per started job, and the jobs it left (adopted by the next invocation) or an
    orphaned local job finish with no Snakemake to clear them, so the next invocation would
    rerun the shard or refuse. A shard marker is written last and whole, so one that
    exists is complete, and one that does not is simply missing: no flag is needed.
    Snakemake's file backend: names are url-safe base64 of the output path."""
    root = Path(workdir) / SNAKEMAKE_INCOMPLETE
    try:
        names = [p for p in root.rglob("*") if p.is_file() and not p.name.startswith("@")]
    except OSError:
        return []
    shards_dir = (run_dir / markers.SHARDS_DIR).resolve()
    cleared = []
    for flag in names:
        parts = [p.removeprefix("@") for p in flag.relative_to(root).parts]
        try:
            text = base64.urlsafe_b64decode("".join(parts).encode()).decode()
        except (ValueError, UnicodeDecodeError):
            continue
        path = Path(text) if Path(text).is_absolute() else Path(workdir) / text
        shard = markers.shard_of_marker(path.name)
        if shard is None or path.parent.resolve() != shards_dir:
            continue
        with contextlib.suppress(OSError):
            flag.unlink()
            cleared.append(shard)
    return sorted(cleared)
