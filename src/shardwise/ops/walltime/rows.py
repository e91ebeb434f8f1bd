"""The rows of the walltime probe of ``shardwise cluster status``, from SLURM's answers:
the job's own limit and shorter ones, a maintenance window (visible, or located by
``ops/walltime/probe.py``) and SLURM's plan for probe jobs, each with when it would
start and the advice they add up to. :func:`probe` is pure: it makes no SLURM call."""

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from shardwise.ops.walltime import probe as walltime_probe
from shardwise.ops.walltime.plan_probe import Outcome, Planned
from shardwise.ops.walltime.probe import Located, Method
from shardwise.slurm import queries
from shardwise.slurm.pending import waits_for_reservation
from shardwise.slurm.queries import Answer


@dataclass(frozen=True, kw_only=True)
class ProbeRow:
    """One answer to "when would a job asking for ``minutes`` start?" (``source``: who
    answered, ``sbatch --test-only`` or a maintenance window)."""

    minutes: int
    label: str
    start: str | None
    starts_now: bool | None
    problem: str | None = None
    source: str = "sbatch --test-only"
    window_start: str | None = None  # where a window row's window begins (HH:MM)
    method: Method = Method.TEST_ONLY


@dataclass(frozen=True, kw_only=True)
class Probe:
    """Would a shorter walltime start now? For the oldest pending job."""

    job_id: str
    shards: int
    submitted: str
    rows: tuple[ProbeRow, ...]
    advice: str
    located: Located | None = None  # how a hidden window was found, when one was
    planned: Planned | None = None  # SLURM's plan for probe jobs of the run's request


def probe(  # noqa: PLR0913 - SLURM's separate answers, keyword-only
    oldest: queries.Job,
    shards: int,
    starts: dict[int, Answer[datetime]],
    *,
    reservations: Answer[list[queries.Reservation]] | None,
    nodes: Answer[list[queries.Node]],
    now: datetime,
    hidden: Answer[Located] | None = None,
    run_dir: str = "<run_dir>",
    planned: bool = True,
    plan: Planned | None = None,
) -> Probe | None:
    """Would a shorter walltime start ``oldest`` (a pending job of ``shards`` shards) now?
    ``starts``: ``--test-only``'s answers by limit (bisection steps included); a visible
    window adds a row, and so does a hidden one (``hidden``: where it starts, and how it
    was found); ``plan`` (SLURM's plan for probe jobs of the request) adds the row that
    says what really starts now, and overrules a window row that claims more. None when
    there is nothing to show."""
    own = oldest.time_limit_minutes or 0
    window = _window_row(reservations, nodes, oldest, own, now)
    if window is None and hidden is not None:
        window = _hidden_row(hidden, nodes, oldest, own, now)
    plan_row = _plan_row(plan, now) if plan is not None else None
    if window is not None and plan_row is not None:
        window = _overruled(window, plan, plan_row)
    if window is None and not starts and plan_row is None:
        return None
    rows = _limit_rows(starts, own, shards, now)
    rows += [r for r in (window, plan_row) if r is not None]
    rows.sort(key=lambda r: -r.minutes)
    advice = _advice(rows, own=own, shards=shards, job=oldest, hidden=hidden, run_dir=run_dir)
    advice = _plan_advice(advice, oldest, plan, planned)
    submitted = oldest.submit_time.isoformat() if oldest.submit_time else ""
    blind = window is not None and window.method is not Method.RESERVATION
    located = hidden.value if hidden is not None and blind else None
    return Probe(
        job_id=oldest.id,
        shards=shards,
        submitted=submitted,
        rows=tuple(rows),
        advice=advice,
        located=located,
        planned=plan,
    )


def _limit_rows(
    starts: dict[int, Answer[datetime]], own: int, shards: int, now: datetime
) -> list[ProbeRow]:
    """One row per standard limit asked, and the longest bisection step that starts now
    (the other bisection steps are not shown)."""
    soon = now + timedelta(minutes=1)
    standard = set(walltime_probe.probe_minutes(own, shards))

    def starts_now(answer: Answer[datetime]) -> bool:
        return answer.ok and answer.value is not None and answer.value <= soon

    found = [m for m, a in starts.items() if m not in standard and starts_now(a)]
    shown = standard | ({max(found)} if found else set())
    rows = []
    for minutes, answer in sorted(starts.items(), reverse=True):
        if minutes not in shown:
            continue  # a bisection step
        label = _label(minutes, own, shards)
        if answer.ok and answer.value is not None:
            when = answer.value.isoformat(timespec="seconds")
            rows.append(
                ProbeRow(minutes=minutes, label=label, start=when, starts_now=answer.value <= soon)
            )
        else:
            row = ProbeRow(minutes=minutes, label=label, start=None, starts_now=None)
            rows.append(replace(row, problem=answer.problem))
    return rows


def _plan_advice(advice: str, oldest: queries.Job, plan: Planned | None, planned: bool) -> str:
    """The advice as SLURM's plan overrules it (nothing starts before the window), and
    said to be provisional while SLURM has not planned the job yet."""
    if plan is not None and plan.longest_now is None:
        advice = f"SLURM's plan for your jobs' request: {plan.why_none()}. A shorter limit does "
        advice += "not start them before the window; they start after it (with walltime.adapt "
        advice += "on, the workflow asks again by itself and lowers them when one fits)"
    if not planned:  # said once, whatever the rest says
        rest = advice.replace("; ask again in a minute", "").replace(", ask again in a minute", "")
        advice = f"SLURM has not planned job {oldest.id} yet (its first backfill pass comes within "
        advice += "bf_interval, 30 s by default): these answers are provisional, ask again in a "
        advice += f"minute. {rest}"
    return advice


PLAN_LABEL = "SLURM's plan starts now"


def _plan_row(plan: Planned, now: datetime) -> ProbeRow:
    """The row of SLURM's plan: the longest limit of the request that started at once."""
    found = plan.longest_now
    if found is None:
        floor = max(1, plan.floor)
        source = "SLURM's plan for probe jobs of your request"
        return ProbeRow(
            minutes=floor,
            label=PLAN_LABEL,
            start=None,
            starts_now=None,
            problem=plan.why_none(),
            source=source,
            window_start=None,
            method=Method.PLANNED,
        )
    longer = [r for r in plan.rungs if r.minutes > found]
    source = f"SLURM's plan: a job of your request asking {found} min started at once"
    if longer:
        nearest = min(longer, key=lambda r: r.minutes)
        why = nearest.reason or nearest.outcome.value
        source += f", one asking {nearest.minutes} min did not ({why})"
    when = now.isoformat(timespec="seconds")
    return ProbeRow(
        minutes=found,
        label=PLAN_LABEL,
        start=when,
        starts_now=True,
        problem=None,
        source=source,
        window_start=None,
        method=Method.PLANNED,
    )


def _overruled(window: ProbeRow, plan: Planned, plan_row: ProbeRow) -> ProbeRow:
    """A window row that claims to start now where SLURM's plan saw a job of the run's
    request, no longer than the row's limit, not start: corrected to say so."""
    now = plan_row.start
    refuted = [
        r
        for r in plan.rungs
        if r.minutes <= window.minutes
        and r.outcome is not Outcome.STARTED
        and not (r.start is not None and now is not None and r.start <= now)
    ]
    if not window.starts_now or not refuted:
        return window
    problem = "not now for your request: " + (
        f"SLURM's plan starts at most {plan_row.minutes} min now (other jobs hold the nodes "
        "until then)"
        if plan_row.starts_now
        else plan_row.problem or "SLURM's plan starts nothing now"
    )
    return ProbeRow(
        minutes=window.minutes,
        label=window.label,
        start=None,
        starts_now=None,
        problem=problem,
        source=window.source,
        window_start=window.window_start,
        method=window.method,
    )


def _window_row(
    reservations: Answer[list[queries.Reservation]] | None,
    nodes: Answer[list[queries.Node]],
    job: queries.Job,
    own: int,
    now: datetime,
) -> ProbeRow | None:
    """The longest limit that ends before the next visible maintenance window: a firmer
    fact than ``--test-only``, which tests behind the run's own pending jobs. It starts now
    when a usable node of its partition is idle or mixed. None when no window is ahead."""
    if reservations is None or not reservations.ok:
        return None
    parts = [p for p in job.partition.split(",") if p]
    window = queries.next_maintenance(reservations.value or [], now, parts)
    if window is None or window.start is None or window.start <= now:
        return None
    minutes = int((window.start - now) / timedelta(minutes=1)) - 1  # a minute to schedule
    if minutes < 1 or (own and minutes >= own):
        return None
    source = f"reservation {window.name} from {window.start:%Y-%m-%d %H:%M}"
    return _window(
        minutes,
        start=window.start,
        source=source,
        method=Method.RESERVATION,
        nodes=nodes,
        job=job,
        now=now,
    )


def _hidden_row(
    hidden: Answer[Located],
    nodes: Answer[list[queries.Node]],
    job: queries.Job,
    own: int,
    now: datetime,
) -> ProbeRow | None:
    """The row of a window located blind: it starts about ``hidden.minutes`` from now."""
    found = hidden.value
    if not hidden.ok or found is None or (own and found.minutes >= own):
        return None
    minutes = max(1, found.minutes - 1)  # a minute to schedule, as for a visible window
    start = datetime.fromisoformat(found.start)
    if found.method is Method.ALLOCATED:
        source = f"inferred: a 1-CPU job ending before {start:%H:%M} was allocated at once, a "
        source += "longer one was not"
    else:
        source = f"inferred: sbatch --test-only starts a small job ending before {start:%H:%M} "
        source += "earlier than one ending after it"
    source += "; reservations are hidden from you"
    return _window(
        minutes, start=start, source=source, method=found.method, nodes=nodes, job=job, now=now
    )


def _window(
    minutes: int,
    *,
    start: datetime,
    source: str,
    method: Method,
    nodes: Answer[list[queries.Node]],
    job: queries.Job,
    now: datetime,
) -> ProbeRow:
    """A limit that ends before a window starting at ``start``: now, if resources are free."""
    begins = f"{start:%H:%M}"
    if _free_in_partition(nodes, job):
        when = now.isoformat(timespec="seconds")
        return ProbeRow(
            minutes=minutes,
            label=WINDOW_LABEL,
            start=when,
            starts_now=True,
            problem=None,
            source=source,
            window_start=begins,
            method=method,
        )
    problem = "no idle node in its partition now: it starts when one frees, if before the window"
    return ProbeRow(
        minutes=minutes,
        label=WINDOW_LABEL,
        start=None,
        starts_now=None,
        problem=problem,
        source=source,
        window_start=begins,
        method=method,
    )


def _free_in_partition(nodes: Answer[list[queries.Node]], job: queries.Job) -> bool:
    """A usable node of the job's partition has free resources now (sinfo, any user)."""
    parts = [p for p in job.partition.split(",") if p]
    ours = [n for n in nodes.value or [] if not parts or n.partition in parts]
    return nodes.ok and any(n.usable and n.has_free_resources for n in ours)


WINDOW_LABEL = "ends before the window"


def _label(minutes: int, own: int, shards: int) -> str:
    if minutes == own:
        return "its own request"
    if shards > 1 and minutes == math.ceil(own / shards):
        return "one shard's share"
    if own and minutes == own // 2:
        return "half of it"
    if own and minutes == own // 4:
        return "a quarter of it"
    return "longest that starts now"


def _advice(
    rows: list[ProbeRow],
    *,
    own: int,
    shards: int,
    job: queries.Job,
    hidden: Answer[int] | None,
    run_dir: str,
) -> str:
    """What to do, from the rows: nothing answered, the job's own request starts now, no
    shorter limit starts earlier, or the longest limit that starts first and how to ask
    for it."""
    answered = [r for r in rows if r.start is not None]
    reserved = waits_for_reservation(job.reason)
    window = next((r for r in rows if r.label == WINDOW_LABEL), None)
    located = ""
    if window is not None and window.method in (Method.INFERRED, Method.ALLOCATED):
        located = f"a maintenance window starts at about {window.window_start} ({window.source}). "
    if not answered:
        return _no_answer(job, located, hidden, reserved=reserved, window=window)
    own_row = next((r for r in answered if r.minutes == own), None)
    if own_row is not None and own_row.starts_now:
        return "its own request would start now: the job waits for the next scheduling pass"
    first = min(r.start for r in answered if r.start)
    if own_row is not None and own_row.start == first:
        return _nothing_earlier(job, reserved=reserved)
    best = max((r for r in answered if r.start == first), key=lambda r: r.minutes)
    tested_now = any(r.starts_now for r in answered if r.method is Method.TEST_ONLY)
    return located + _shorten(
        best, own_row, first=first, tested_now=tested_now, own=own, shards=shards, run_dir=run_dir
    )


def _no_answer(
    job: queries.Job,
    located: str,
    hidden: Answer[int] | None,
    *,
    reserved: bool,
    window: ProbeRow | None,
) -> str:
    """No limit was answered: a hidden window that could not be located, or no answer."""
    if reserved and window is None:
        why = hidden.problem if hidden is not None and not hidden.ok else "no answer"
        text = f"the job waits for a reservation ({job.reason}) that is hidden from you, and "
        return text + f"it could not be located ({why}): ask the site when maintenance starts"
    return located + "sbatch --test-only gave no answer; see the problems above"


def _nothing_earlier(job: queries.Job, *, reserved: bool) -> str:
    """The job's own limit starts first: the wait is not about time (or the window)."""
    if reserved:
        text = f"the job waits for a reservation ({job.reason}), yet no shorter limit was "
        text += "found that starts earlier: the window may already be open, or its nodes "
        return text + "are busy; see the pending reason"
    why = "the wait is not about time (see the pending reason)"
    return f"no shorter walltime starts earlier: {why}"


def _shorten(
    best: ProbeRow,
    own_row: ProbeRow | None,
    *,
    first: str,
    tested_now: bool,
    own: int,
    shards: int,
    run_dir: str,
) -> str:
    """Ask for ``best``'s limit: retime the queued jobs, and what the next submissions set."""
    when = "now" if best.starts_now else f"at {first.replace('T', ' ')}"
    behind = ""
    if best.label == WINDOW_LABEL and not tested_now:
        behind = " (sbatch --test-only found no limit that starts now: it adds to its answer "
        behind += "the time of the pending jobs ahead in the partition, this run's own included)"
    instead = f" instead of {own_row.start.replace('T', ' ')}" if own_row and own_row.start else ""
    share = math.ceil(own / max(shards, 1))  # one shard's walltime in this job
    options = [f"walltime.max_minutes: {max(1, best.minutes // max(shards, 1))} (K={shards})"]
    k = best.minutes // max(share, 1)
    if 1 <= k < shards:
        options.append(f"--group-components classify={k} (shards keep their walltime)")
    text = f"a job asking for {best.minutes} min or less starts {when}{instead}{behind} "
    text += f"(yours asks for {own} min for {shards} shard(s)): shorten the queued jobs in place "
    text += f"with `shardwise cluster retime --run-dir {run_dir} --max-minutes {best.minutes}` "
    text += "(decrease only; a shard cut short resumes on its retry), and for the next "
    return text + f"submissions set {' or '.join(options)}"
