"""What ``cluster status`` asks SLURM, gathered once (:func:`status_facts`): the user's
queue, the config, nodes and limits, other users' jobs in the run's partitions, and, for
the oldest pending job of the run, ``--test-only``, SLURM's plan for probe jobs of its
request and a hidden window located blind; none of it while the live workflow's own
walltime fit is in force or it adapts (it probes itself). ``status.build`` reads these
facts and the run directory only."""

import functools
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from shardwise.errors import RecordError
from shardwise.ops.walltime import plan_probe
from shardwise.ops.walltime import probe as walltime_probe
from shardwise.ops.walltime.plan_probe import Planned
from shardwise.planner import inflight
from shardwise.run import adaptation, claims
from shardwise.slurm import command, queries
from shardwise.slurm.queries import Answer


@dataclass(frozen=True, kw_only=True)
class StatusFacts:
    """What SLURM said, gathered once for one view."""

    user: str
    now: datetime
    queue: Answer[list[queries.Job]]
    config: Answer[dict[str, str]]
    nodes: Answer[list[queries.Node]]
    limits: Answer[queries.Limits]
    others: Answer[list[queries.Job]] | None
    probe_detail: Answer[dict[str, str]] | None
    probe_starts: dict[int, Answer[datetime]]
    reservations: Answer[list[queries.Reservation]] | None = None
    #: A window hidden from the user, located blind: where it starts, and how.
    hidden_window: Answer[walltime_probe.Located] | None = None
    #: SLURM's plan for probe jobs of the pending job's request (what really starts now).
    planned: Planned | None = None
    #: The live workflow's walltime fit in force: shown as the answer, no probe made.
    fit: adaptation.Fit | None = None
    #: A live workflow of the run that adapts its walltimes: it probes, this view does not.
    adapting: claims.Submitter | None = None
    #: Why ``sbatch --test-only`` was not asked (its answer is known to be wrong here).
    untrusted: str | None = None


def run_jobs(
    run_dir: Path, queue: list[queries.Job], submitter: claims.Submitter | None
) -> dict[str, tuple[queries.Job, tuple[int, ...]]]:
    """The run's live jobs (job id -> job, shards), from claims and the queue."""
    by_id = {j.id: j for j in queue}
    out: dict[str, tuple[queries.Job, tuple[int, ...]]] = {}
    if submitter is not None:
        for job, shards in inflight.queued_shards(run_dir, submitter, queue).items():
            out[job.id] = (job, tuple(shards))
    for shard, claim in claims.read_claims(run_dir).items():
        job = by_id.get(claim.slurm_job_id or "")
        if job is not None and job.id not in out:
            out[job.id] = (job, (shard,))
    return out


def fit_in_force(run_dir: Path, now: datetime) -> adaptation.Fit | None:
    """The live workflow's walltime fit, while in force: SLURM's plan it already asked,
    which a second probe by ``cluster status`` would only contradict or repeat."""
    try:
        record = adaptation.load(run_dir)
    except RecordError:
        return None
    fit = record.fit if record is not None else None
    if fit is None or fit.cap(now) is None:
        return None
    return fit if main_process(claims.Submitter.recorded(run_dir))["alive"] else None


@dataclass(frozen=True)
class _ProbeFacts:
    """What the walltime probe asked SLURM about the oldest pending job."""

    detail: Answer[dict[str, str]] | None = None
    starts: dict[int, Answer[datetime]] = field(default_factory=dict)
    windows: Answer[list[queries.Reservation]] | None = None
    hidden: Answer[walltime_probe.Located] | None = None
    planned: Planned | None = None


def status_facts(
    run_dir: Path, *, timeout: float = command.DEFAULT_TIMEOUT, probe: bool = False
) -> StatusFacts:
    """Ask SLURM what the view needs (the walltime probe only when a job pends, and not
    while the workflow's own adaptation is in force or a live workflow adapts, unless
    ``probe`` asks for it)."""
    user = queries.current_user()
    queue = queries.jobs(user, timeout=timeout)
    cleared = plan_probe.clear_leftovers(queue, timeout)
    if walltime_probe.clear_leftover_probes(user, queue, timeout) or cleared:
        queue = queries.jobs(user, timeout=timeout)
    cfg = queries.config(timeout=timeout)
    accounting = cfg.ok and queries.accounting_enabled(cfg.value or {})
    why = "accounting is off: the submit cap is unknown"
    off: Answer[queries.Limits] = Answer(None, why, "failed")
    limits = queries.limits(user, timeout=timeout) if accounting or not cfg.ok else off
    mine = run_jobs(run_dir, queue.value or [], claims.Submitter.recorded(run_dir))
    oldest = probed_job(mine)
    fitted = None if probe else fit_in_force(run_dir, datetime.now())
    adapting = None if probe or fitted is not None else adapting_workflow(run_dir)
    if fitted is not None or adapting is not None:
        oldest = None  # the workflow's fit is the answer, or it probes itself: one probe
    untrusted = test_only_untrusted(oldest, cfg.value or {}) if oldest is not None else None
    asked = _probe_facts(mine, oldest, cfg, untrusted, timeout) if oldest else _ProbeFacts()
    return StatusFacts(
        user=user,
        now=datetime.now(),
        queue=queue,
        config=cfg,
        nodes=queries.nodes(timeout=timeout),
        limits=limits,
        others=_others(user, mine, cfg, timeout),
        probe_detail=asked.detail,
        probe_starts=asked.starts,
        reservations=asked.windows,
        hidden_window=asked.hidden,
        planned=asked.planned,
        fit=fitted,
        adapting=adapting,
        untrusted=untrusted,
    )


def _probe_facts(
    mine: dict[str, tuple[queries.Job, tuple[int, ...]]],
    oldest: queries.Job,
    cfg: Answer[dict[str, str]],
    untrusted: str | None,
    timeout: float,
) -> _ProbeFacts:
    """``--test-only`` (where its answer can stand), SLURM's plan for probe jobs of the
    request (while it pends for a reservation) and a hidden window located blind."""
    windows = queries.reservations(timeout=timeout)
    detail = queries.job_detail(oldest.id, timeout=timeout)
    if not detail.ok or not detail.value:
        return _ProbeFacts(detail=detail, windows=windows)
    starts: dict[int, Answer[datetime]] = {}
    request = detail.value
    options = functools.partial(walltime_probe.test_only_options, request)
    asked = walltime_probe.probe_minutes(oldest.time_limit_minutes, len(mine[oldest.id][1]) or 1)
    if untrusted is None:
        ask = walltime_probe.test_only(starts, options, timeout)
        walltime_probe.longest_starting_now(ask, asked, datetime.now())
    if not walltime_probe.waits_for_reservation(oldest.reason):
        return _ProbeFacts(detail=detail, starts=starts, windows=windows)
    # first: it waits for a live workflow's probes, which would refuse the allocations
    # below for priority while they pend
    bf = queries.backfill_interval_seconds(cfg.value or {}) if cfg.ok else 30
    own = oldest.time_limit_minutes or 1
    planned = plan_probe.probe(options, own, 1, bf_interval=bf, timeout=timeout)
    hidden = None
    if not walltime_probe.visible_window(windows, oldest):
        hidden = walltime_probe.locate_window(request, asked, timeout)
    return _ProbeFacts(detail, starts, windows, hidden, planned)


def _others(
    user: str,
    mine: dict[str, tuple[queries.Job, tuple[int, ...]]],
    cfg: Answer[dict[str, str]],
    timeout: float,
) -> Answer[list[queries.Job]] | None:
    """Other users' jobs in the run's partitions (None: hidden, or no partition)."""
    private = cfg.ok and "jobs" in queries.private_data(cfg.value or {})
    parts = sorted({p for j, _ in mine.values() for p in j.partition.split(",") if p})
    if not parts or private:
        return None
    found = queries.partition_jobs(parts, timeout=timeout)
    return Answer([j for j in found.value or [] if j.user != user]) if found.ok else found


def adapting_workflow(run_dir: Path) -> claims.Submitter | None:
    """The run's live workflow on a cluster (its walltime adaptation probes SLURM's plan
    itself while a job pends for a reservation); None when none is known to be live."""
    submitter = claims.Submitter.recorded(run_dir)
    if submitter is None or not submitter.cluster:
        return None
    try:
        record = adaptation.load(run_dir)
    except RecordError:
        return None
    since = inflight.local_time(record.since) if record and record.since else None
    began = inflight.local_time(submitter.started_at)
    if since is None or began is None or since < began:  # walltime.adapt is off for it
        return None
    return submitter if main_process(submitter)["alive"] else None


def test_only_untrusted(job: queries.Job, cfg: dict[str, str]) -> str | None:
    """Why ``sbatch --test-only`` would answer wrongly for ``job``: it tests one partition
    of a list, and under PrivateData it places its test job behind the user's own pending
    ones (checked on the test cluster); None when its answer can stand."""
    if "," in job.partition:
        return f"job {job.id} may start in any of {job.partition}, and --test-only tests one"
    if "jobs" in queries.private_data(cfg):
        return "PrivateData hides jobs, and --test-only answers behind your own pending jobs"
    return None


def probed_job(mine: dict[str, tuple[queries.Job, tuple[int, ...]]]) -> queries.Job | None:
    """The pending job the walltime probe asks about: the oldest that waits for a
    reservation, else the oldest (SLURM gives untested jobs the reason ``Priority``)."""
    waiting = [j for j, _ in mine.values() if j.pending]
    pending = sorted(waiting, key=lambda j: (j.submit_time or datetime.max, job_number(j.id)))
    reserved = [j for j in pending if walltime_probe.waits_for_reservation(j.reason)]
    return (reserved or pending or [None])[0]


def job_number(text: str) -> int:
    """A SLURM job id's number (an array task's or a step's suffix aside), 0 if none."""
    m = re.match(r"\d+", text)
    return int(m.group(0)) if m else 0


def main_process(submitter: claims.Submitter | None) -> dict[str, Any]:
    """Where the run's top-level workflow runs and whether it is alive (None: unknown)."""
    if submitter is None:
        return {"host": None, "pid": None, "alive": None, "since": None}
    alive: bool | None = None
    if submitter.host == claims.hostname() and submitter.pid:
        alive = claims.process_alive(submitter.pid, None)
    elif submitter.slurm_job_id:  # `shardwise launch`: its launcher job, on any node
        states = queries.job_states([submitter.slurm_job_id])
        state = (states.value or {}).get(submitter.slurm_job_id, "") if states.ok else None
        alive = None if state is None else state in queries.LIVE_STATES
    since = inflight.local_time(submitter.started_at)
    return {"host": submitter.host, "pid": submitter.pid, "alive": alive, "since": since}
