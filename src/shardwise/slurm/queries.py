"""What the SLURM cluster says, as typed values: one function per question.

Each function makes one SLURM call through :mod:`shardwise.slurm.command` and returns an
:class:`Answer`: the value, or None and the one-line problem (command missing, timed
out, refused, hidden by ``PrivateData``). Nothing here decides what is good or bad;
that is :mod:`shardwise.ops.cluster.check` and :mod:`shardwise.ops.cluster.status`.
"""

import getpass
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

from shardwise.slurm import command

T = TypeVar("T")

#: Job states squeue lists by default: the job still holds (or waits for) resources.
LIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
     "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT",
     "RESV_DEL_HOLD"}
)  # fmt: skip

#: squeue -O fields as (our name, squeue's name); the free-text comment last.
_JOB_FIELDS = (
    ("id", "JobID"), ("state", "State"), ("name", "Name"), ("user", "UserName"),
    ("partition", "Partition"), ("time_limit", "TimeLimit"),
    ("submit_time", "SubmitTime"), ("start_time", "StartTime"), ("nodes", "NodeList"),
    ("tres_alloc", "tres-alloc"), ("tres_per_job", "tres-per-job"),
    ("tres_per_node", "tres-per-node"), ("qos", "QOS"), ("account", "Account"),
    ("workdir", "WorkDir"), ("reason", "Reason"), ("requeue", "Requeue"),
    ("restarts", "RestartCnt"), ("comment", "Comment"),
)  # fmt: skip


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A value from SLURM, or why there is none (``problem``, one line)."""

    value: T | None
    problem: str | None = None
    kind: str = "ok"

    @property
    def ok(self) -> bool:
        """True when SLURM answered."""
        return self.problem is None


def _failed(reply: command.Reply) -> Answer:
    return Answer(None, reply.problem, reply.kind)


def _ask(argv: Sequence[str], timeout: float, parse: Callable[[str], T]) -> Answer[T]:
    """One SLURM command's reply, parsed; or why there is none."""
    reply = command.run(argv, timeout=timeout)
    return Answer(parse(reply.stdout)) if reply.ok else _failed(reply)


def _text(value: str | None) -> str:
    """A field as text, "" for SLURM's spellings of no value."""
    return "" if command.is_null(value) else str(value)


def current_user() -> str:
    """The login name SLURM knows this user by."""
    return getpass.getuser()


def config(timeout: float = command.DEFAULT_TIMEOUT) -> Answer[dict[str, str]]:
    """``scontrol show config`` as a dict (MinJobAge, PrivateData, AccountingStorageType...)."""
    return _ask(["scontrol", "show", "config"], timeout, command.config_values)


def min_job_age_seconds(cfg: dict[str, str]) -> int | None:
    """``MinJobAge = 300 sec`` -> 300."""
    m = re.match(r"\s*(\d+)", cfg.get("MinJobAge", ""))
    return int(m.group(1)) if m else None


def accounting_enabled(cfg: dict[str, str]) -> bool:
    """False when the controller stores no accounting (``accounting_storage/none``)."""
    kind = cfg.get("AccountingStorageType", "")
    return bool(kind) and not kind.endswith("/none")


def requires_account(cfg: dict[str, str]) -> bool:
    """Whether a job without a valid account is refused: accounting is on and it enforces
    associations (``AccountingStorageEnforce`` with ``associations``, or ``limits``,
    ``qos`` or ``safe``, which imply it)."""
    if not accounting_enabled(cfg):
        return False
    enforced = {p.strip().lower() for p in cfg.get("AccountingStorageEnforce", "").split(",")}
    return bool(enforced & {"associations", "limits", "qos", "safe"})


def private_data(cfg: dict[str, str]) -> frozenset[str]:
    """``PrivateData`` flags (``jobs``, ``reservations``, ...), lower case."""
    raw = cfg.get("PrivateData", "")
    if command.is_null(raw) or raw.strip().lower() == "none":
        return frozenset()
    return frozenset(p.strip().lower() for p in raw.split(",") if p.strip())


@dataclass(frozen=True, kw_only=True)
class Node:
    """One node as one partition sees it (sinfo -N prints a row per node and partition)."""

    name: str
    partition: str
    default_partition: bool
    partition_up: bool
    max_minutes: int | None
    gres: str
    state: str
    features: frozenset[str]
    reason: str
    reason_time: str

    @property
    def gpus(self) -> int:
        """GPUs in the node's gres (``gpu:2``, ``gpu:a100:4(S:0-1)``)."""
        return gpu_count(self.gres)

    @property
    def usable(self) -> bool:
        """Not down, drained, failing or in maintenance: jobs can start on it."""
        bad = ("down", "drain", "fail", "maint", "no_respond", "not_responding", "inval")
        return not any(b in self.state.lower() for b in bad) and not self.state.endswith("*")

    @property
    def has_free_resources(self) -> bool:
        """Idle or mixed, whatever the state's flag suffixes; ``planned`` (22.05+) is an
        idle node backfill holds for a later job: a job that ends before then starts now."""
        free = {"idle", "mixed", "planned"}
        return self.state.lower().rstrip("+~#!%$@^-").split("+")[0] in free


def gpu_count(gres: str) -> int:
    """Sum of the gpu counts in a gres or TRES string (``gpu:a100:4``, ``gres/gpu=2``)."""
    total = 0
    for raw in re.split(r",(?![^(]*\))", gres or ""):
        part = re.sub(r"\(.*?\)", "", raw.strip())
        m = re.match(r"^(?:gres[:/])?gpu(?::[^:=]+)?[:=](\d+)$", part)
        if m:
            total += int(m.group(1))
    return total


def gpu_types(tres: str) -> dict[str, int]:
    """GPU counts by type in a TRES string: ``gres/gpu:a100=2`` -> {a100: 2}; untyped -> {gpu}."""
    found: dict[str, int] = {}
    typed = False
    for part in (tres or "").split(","):
        m = re.match(r"^gres/gpu(?::([^=]+))?=(\d+)$", part.strip())
        if m and m.group(1):
            found[m.group(1)] = found.get(m.group(1), 0) + int(m.group(2))
            typed = True
    if not typed:
        n = gpu_count(tres)
        if n:
            found["gpu"] = n
    return found


def nodes(timeout: float = command.DEFAULT_TIMEOUT) -> Answer[list[Node]]:
    """Every node of every partition visible to this user, with state and drain reason."""
    return _ask(["sinfo", "-h", "-N", "-o", "%N|%P|%a|%l|%G|%T|%f|%H|%E"], timeout, parse_nodes)


_NODE_FIELDS = ("node", "partition", "avail", "timelimit", "gres", "state", "features", "rtime")


def parse_nodes(text: str) -> list[Node]:
    """``sinfo -h -N -o '%N|%P|%a|%l|%G|%T|%f|%H|%E'`` as nodes."""
    return [
        Node(
            name=r["node"],
            partition=r["partition"].rstrip("*"),
            default_partition=r["partition"].endswith("*"),
            partition_up=r["avail"].lower() == "up",
            max_minutes=command.minutes(r["timelimit"]),
            gres=_text(r["gres"]),
            state=r["state"],
            features=frozenset(f for f in _text(r["features"]).split(",") if f),
            reason="" if r["reason"].strip().lower() == "none" else _text(r["reason"]),
            reason_time=_text(r["rtime"]),
        )
        for r in command.rows(text, (*_NODE_FIELDS, "reason"))
    ]


@dataclass(frozen=True, kw_only=True)
class Partition:
    """A partition summarised from its nodes."""

    name: str
    default: bool
    up: bool
    max_minutes: int | None
    nodes: tuple[str, ...]
    gpus: int
    usable_gpus: int
    features: frozenset[str]


def partitions(all_nodes: Sequence[Node]) -> dict[str, Partition]:
    """Partitions by name, from :func:`nodes` (no extra call)."""
    by: dict[str, list[Node]] = {}
    for n in all_nodes:
        by.setdefault(n.partition, []).append(n)
    return {
        name: Partition(
            name=name,
            default=any(n.default_partition for n in ns),
            up=all(n.partition_up for n in ns),
            max_minutes=ns[0].max_minutes,
            nodes=tuple(sorted({n.name for n in ns})),
            gpus=sum(n.gpus for n in ns),
            usable_gpus=sum(n.gpus for n in ns if n.usable),
            features=frozenset().union(*(n.features for n in ns)),
        )
        for name, ns in by.items()
    }


@dataclass(frozen=True, kw_only=True)
class Job:
    """One job as ``squeue`` lists it."""

    id: str
    state: str
    name: str
    user: str
    partition: str
    time_limit_minutes: int | None
    submit_time: datetime | None
    start_time: datetime | None
    nodes: str
    tres_alloc: str
    tres_per_job: str
    tres_per_node: str
    qos: str
    account: str
    workdir: str
    reason: str
    comment: str
    requeue: bool | None = None  # SLURM may requeue it (sbatch --requeue); None: unknown
    restarts: int = 0  # times SLURM requeued it (preempted, node failure, scontrol requeue)

    @property
    def pending(self) -> bool:
        """Waiting to start."""
        return self.state == "PENDING"

    @property
    def running(self) -> bool:
        """Holding its allocation."""
        return self.state in {"RUNNING", "CONFIGURING", "COMPLETING", "SIGNALING"}

    @property
    def gpus(self) -> int:
        """GPUs allocated (running) or requested (pending)."""
        tres = (self.tres_alloc, self.tres_per_job, self.tres_per_node)
        return next((n for t in tres if (n := gpu_count(t))), 0)


def jobs(user: str | None = None, timeout: float = command.DEFAULT_TIMEOUT) -> Answer[list[Job]]:
    """The user's jobs that squeue still lists (pending, running, completing, ...)."""
    fmt = ",".join(f"{opt}:|" for _, opt in _JOB_FIELDS)
    argv = ["squeue", "-h", "-u", user or current_user(), "-O", fmt]
    return _ask(argv, timeout, lambda out: [_job(r) for r in command.rows(out, _JOB_KEYS)])


_JOB_KEYS = tuple(k for k, _ in _JOB_FIELDS)


def jobs_by_id(
    job_ids: Sequence[str], timeout: float = command.DEFAULT_TIMEOUT
) -> Answer[list[Job]]:
    """These jobs in any state squeue still keeps (finished ones within MinJobAge); ids
    it no longer knows are absent."""
    if not job_ids:
        return Answer([])
    fmt = ",".join(f"{opt}:|" for _, opt in _JOB_FIELDS)
    argv = ["squeue", "-h", "--states=all", "-j", ",".join(job_ids), "-O", fmt]
    reply = command.run(argv, timeout=timeout)
    if not reply.ok:
        if "Invalid job id" in (reply.stderr or ""):
            return Answer([])
        return _failed(reply)
    return Answer([_job(r) for r in command.rows(reply.stdout, _JOB_KEYS)])


def backfill_interval_seconds(cfg: dict[str, str]) -> int:
    """How often the backfill scheduler plans the queue: ``bf_interval`` in
    ``SchedulerParameters`` (SLURM's default 30 s)."""
    m = re.search(r"bf_interval=(\d+)", cfg.get("SchedulerParameters", ""))
    return int(m.group(1)) if m else 30


def _job(r: dict[str, str]) -> Job:
    """One row of squeue's ``-O`` reply."""
    plain = {
        k: r[k]
        for k in (
            "id",
            "state",
            "name",
            "user",
            "partition",
            "tres_alloc",
            "qos",
            "account",
            "workdir",
        )
    }
    blank = {k: _text(r[k]) for k in ("nodes", "tres_per_job", "tres_per_node", "reason")}
    return Job(
        **plain,
        **blank,
        requeue={"1": True, "0": False}.get(r["requeue"].strip()),
        restarts=command.count(r["restarts"]) or 0,
        time_limit_minutes=command.minutes(r["time_limit"]),
        submit_time=command.timestamp(r["submit_time"]),
        start_time=command.timestamp(r["start_time"]),
        comment=_text(r["comment"].removesuffix("|").strip()),
    )


def partition_jobs(
    partitions: Sequence[str], timeout: float = command.DEFAULT_TIMEOUT
) -> Answer[list[Job]]:
    """Every user's pending and running jobs in ``partitions`` (id, state, user, partition);
    under ``PrivateData=jobs`` an ordinary user sees only their own: callers check first."""
    argv = ["squeue", "-h", "-t", "PD,R", "-p", ",".join(partitions), "-o", "%i|%T|%u|%P"]
    names = ("id", "state", "user", "partition")
    return _ask(argv, timeout, lambda out: [_partial_job(**r) for r in command.rows(out, names)])


def _partial_job(id: str, state: str, user: str, partition: str) -> Job:
    """A job as another user's queue shows it: no request, no times."""
    blank = dict.fromkeys(
        (
            "name",
            "nodes",
            "tres_alloc",
            "tres_per_job",
            "tres_per_node",
            "qos",
            "account",
            "workdir",
            "reason",
            "comment",
        ),
        "",
    )
    times = dict.fromkeys(("time_limit_minutes", "submit_time", "start_time"), None)
    return Job(id=id, state=state, user=user, partition=partition, **blank, **times)


def sacct_answers(user: str | None = None, timeout: float = 15.0) -> Answer[bool]:
    """Whether ``sacct`` answers for this user now (the plugin's status command needs it)."""
    who = user or current_user()
    argv = ["sacct", "-n", "-X", "-P", "-u", who, "-S", "now-1minutes", "-o", "JobIDRaw"]
    reply = command.run(argv, timeout=timeout)
    return Answer(True) if reply.ok else _failed(reply)


def job_states(
    job_ids: Sequence[str], timeout: float = command.DEFAULT_TIMEOUT
) -> Answer[dict[str, str]]:
    """State of each listed job that squeue still knows (finished ones within MinJobAge);
    a job id squeue no longer knows is absent: it ended long ago."""
    if not job_ids:
        return Answer({})
    argv = ["squeue", "-h", "--states=all", "-j", ",".join(job_ids), "-o", "%i|%T"]
    reply = command.run(argv, timeout=timeout)
    if not reply.ok:
        if "Invalid job id" in (reply.stderr or ""):
            return Answer({})  # every id is unknown: all of them ended long ago
        return _failed(reply)
    return Answer({r["id"]: r["state"] for r in command.rows(reply.stdout, ("id", "state"))})


def accounted_states(
    job_ids: Sequence[str], timeout: float = command.DEFAULT_TIMEOUT
) -> Answer[dict[str, str]]:
    """How each listed job stands in SLURM's accounting (``COMPLETED``, ``CANCELLED by
    0``, ``TIMEOUT``, ``NODE_FAIL``, ``PENDING``...), ended long ago too; a job sacct
    does not know is absent."""
    if not job_ids:
        return Answer({})
    argv = ["sacct", "-n", "-X", "-P", "-j", ",".join(job_ids), "-o", "JobIDRaw,State"]
    return _ask(argv, timeout, _states)


def _states(out: str) -> dict[str, str]:
    return {r["id"]: r["state"] for r in command.rows(out, ("id", "state"))}


def steps(user: str | None = None, timeout: float = command.DEFAULT_TIMEOUT) -> Answer[set[str]]:
    """Ids (``<job>.<step>``) of the user's running job steps."""
    argv = ["squeue", "-h", "-s", "-u", user or current_user(), "-o", "%i"]
    return _ask(argv, timeout, lambda out: set(out.split()))


def job_detail(job_id: str, timeout: float = command.DEFAULT_TIMEOUT) -> Answer[dict[str, str]]:
    """``scontrol show job -o`` of one job (its full request: features, excluded nodes...)."""
    return _ask(["scontrol", "show", "job", "-o", job_id], timeout, _first_record)


def _first_record(out: str) -> dict[str, str]:
    """The first record of an ``scontrol -o`` reply ({} when there is none)."""
    return command.key_values((out.strip().splitlines() or [""])[0])


def batch_script(job_id: str, timeout: float = command.DEFAULT_TIMEOUT) -> Answer[str]:
    """The batch script of a live job (for ``--wrap`` jobs: the wrapped command)."""
    return _ask(["scontrol", "write", "batch_script", job_id, "-"], timeout, str)


@dataclass(frozen=True)
class Qos:
    """A QOS's per-user limits (None: not set)."""

    name: str
    max_submit_per_user: int | None


@dataclass(frozen=True, kw_only=True)
class Association:
    """One of the user's associations (account, partition, QOS list, caps)."""

    account: str
    partition: str
    qos: tuple[str, ...]
    default_qos: str
    max_submit_jobs: int | None


@dataclass(frozen=True)
class Limits:
    """What sacctmgr says about the user: associations, QOS limits, default account."""

    associations: tuple[Association, ...]
    qos: dict[str, Qos] = field(default_factory=dict)
    default_account: str = ""

    @property
    def accounts(self) -> tuple[str, ...]:
        """Accounts the user may submit to."""
        return tuple(sorted({a.account for a in self.associations if a.account}))


def limits(user: str | None = None, timeout: float = command.DEFAULT_TIMEOUT) -> Answer[Limits]:
    """Associations and QOS limits of ``user`` (needs slurmdbd; else the problem says so)."""
    user = user or current_user()
    fmt = "format=account,partition,qos,defaultqos,maxsubmitjobs"
    assoc = command.run(["sacctmgr", "-nP", "show", "assoc", f"user={user}", fmt], timeout=timeout)
    if not assoc.ok:
        return _failed(assoc)
    fmt = "format=name,maxsubmitjobsperuser"
    qos = command.run(["sacctmgr", "-nP", "show", "qos", fmt], timeout=timeout)
    if not qos.ok:
        return _failed(qos)
    fmt = "format=defaultaccount"
    who = command.run(["sacctmgr", "-nP", "show", "user", user, fmt], timeout=timeout)
    names = ("account", "partition", "qos", "defqos", "maxsubmit")
    associations = tuple(
        Association(
            account=r["account"],
            partition=r["partition"],
            qos=tuple(q for q in r["qos"].split(",") if q),
            default_qos=r["defqos"],
            max_submit_jobs=command.count(r["maxsubmit"]),
        )
        for r in command.rows(assoc.stdout, names)
    )
    qos_map = {
        r["name"]: Qos(r["name"], command.count(r["maxsubmit"]))
        for r in command.rows(qos.stdout, ("name", "maxsubmit"))
    }
    default = who.stdout.strip().splitlines()[0].strip() if who.ok and who.stdout.strip() else ""
    return Answer(Limits(associations, qos_map, default))


@dataclass(frozen=True, kw_only=True)
class Reservation:
    """A reservation this user can see."""

    name: str
    start: datetime | None
    end: datetime | None
    nodes: str
    flags: tuple[str, ...]
    partition: str

    @property
    def maintenance(self) -> bool:
        """Flagged MAINT: no job may run on its nodes during the window."""
        return "MAINT" in self.flags


def reservations(timeout: float = command.DEFAULT_TIMEOUT) -> Answer[list[Reservation]]:
    """Reservations visible to this user (PrivateData=reservations hides the others)."""
    reply = command.run(["scontrol", "show", "reservation", "-o"], timeout=timeout)
    if not reply.ok:
        if "No reservations" in reply.stdout + reply.stderr:
            return Answer([])
        return _failed(reply)
    return Answer(parse_reservations(reply.stdout))


def parse_reservations(text: str) -> list[Reservation]:
    """``scontrol show reservation -o`` as reservations ("No reservations..." -> [])."""
    lines = (line for line in text.splitlines() if line.startswith("ReservationName="))
    return [
        Reservation(
            name=kv.get("ReservationName", ""),
            start=command.timestamp(kv.get("StartTime")),
            end=command.timestamp(kv.get("EndTime")),
            nodes=kv.get("Nodes", ""),
            flags=tuple(f for f in kv.get("Flags", "").split(",") if f),
            partition=_text(kv.get("PartitionName")),
        )
        for kv in map(command.key_values, lines)
    ]


def next_maintenance(
    found: Sequence[Reservation], now: datetime, partitions: Collection[str] = ()
) -> Reservation | None:
    """The earliest MAINT reservation not yet over that may cover ``partitions``: one
    naming another partition is left out, node lists are kept rather than guessed (the
    warning errs toward caution)."""
    windows = [
        r
        for r in found
        if r.maintenance
        and r.start is not None
        and (r.end is None or r.end >= now)
        and not (r.partition and partitions and r.partition not in partitions)
    ]
    return min(windows, key=lambda r: r.start or now, default=None)


_START = re.compile(r"to start at (\S+)")


def test_only(options: Sequence[str], timeout: float = command.DEFAULT_TIMEOUT) -> Answer[datetime]:
    """When SLURM expects a job with these sbatch ``options`` to start (submits nothing)."""
    reply = command.run(["sbatch", "--test-only", *options, "--wrap", "true"], timeout=timeout)
    if not reply.ok:
        return _failed(reply)
    m = _START.search(reply.stderr + reply.stdout)
    if not m:
        text = " ".join((reply.stderr + reply.stdout).split())
        return Answer(None, f"sbatch --test-only gave no start time: {text}", "failed")
    when = command.timestamp(m.group(1))
    if when is None:
        return Answer(None, f"sbatch --test-only: unreadable start time {m.group(1)!r}", "failed")
    return Answer(when)


def run_history(job_id: str, timeout: float = command.DEFAULT_TIMEOUT) -> Answer[list[str]]:
    """How each run of a job ended, oldest first (``sacct -D``: a requeued job's earlier
    runs read ``PREEMPTED``, ``NODE_FAIL`` or ``REQUEUED``); needs accounting."""
    argv = ["sacct", "-n", "-P", "-X", "-D", "-j", job_id, "-o", "State"]
    return _ask(argv, timeout, lambda out: [s.split()[0] for s in out.split("\n") if s.strip()])


@dataclass(frozen=True, kw_only=True)
class Preemption:
    """How a partition or a QOS treats the jobs it preempts, as SLURM says."""

    name: str
    mode: str  # OFF, CANCEL, REQUEUE, SUSPEND (GANG), or "" when the cluster default applies
    grace_seconds: int | None  # SIGTERM before SIGKILL; None: unknown
    priority_tier: int | None = None  # partitions: a higher tier preempts a lower one
    preempts: tuple[str, ...] = ()  # QOS: the QOS whose jobs this one may preempt


def partition_preemption(
    timeout: float = command.DEFAULT_TIMEOUT,
) -> Answer[dict[str, Preemption]]:
    """Each visible partition's ``PreemptMode``, ``GraceTime`` and ``PriorityTier``
    (``scontrol show partition -o``)."""

    def parse(out: str) -> dict[str, Preemption]:
        found = {}
        for line in out.splitlines():
            kv = command.key_values(line)
            if "PartitionName" in kv:
                found[kv["PartitionName"]] = Preemption(
                    name=kv["PartitionName"],
                    mode=_text(kv.get("PreemptMode")).upper(),
                    grace_seconds=command.count(kv.get("GraceTime")),
                    priority_tier=command.count(kv.get("PriorityTier")),
                )
        return found

    return _ask(["scontrol", "show", "partition", "-o"], timeout, parse)


def qos_preemption(timeout: float = command.DEFAULT_TIMEOUT) -> Answer[dict[str, Preemption]]:
    """Each QOS's ``PreemptMode``, ``GraceTime`` and the QOS it may preempt (sacctmgr:
    needs slurmdbd)."""
    argv = ["sacctmgr", "-nP", "show", "qos", "format=name,preempt,preemptmode,gracetime"]

    def parse(out: str) -> dict[str, Preemption]:
        rows = command.rows(out, ("name", "preempt", "mode", "grace"))
        return {
            r["name"]: Preemption(
                name=r["name"],
                mode=r["mode"].upper() if r["mode"].lower() != "cluster" else "",
                grace_seconds=command.seconds(r["grace"]),
                preempts=tuple(q for q in r["preempt"].split(",") if q),
            )
            for r in rows
        }

    return _ask(argv, timeout, parse)
