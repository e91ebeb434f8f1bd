"""The launcher chain's files, under ``<run_dir>/launch/``: what ``shardwise launch`` asked
for, and what each launcher generation did.

``launch.json`` (:class:`Launch`) is the request every generation repeats when it queues
its successor: the SLURM job's size and limit, the working directory and the snakemake
command line. ``stopped_at`` is set by ``shardwise launch --stop``: a generation that
starts after it exits at once. ``chain.jsonl`` holds one :class:`ChainEvent` per thing a
generation did (started, queued its successor, stopped before its walltime, ended), read
by ``shardwise launch --status``. The chain's SLURM job name (:func:`chain_name`) derives
from the run directory, so ``--dependency=singleton`` allows one launcher per run at once.
"""

import dataclasses
import hashlib
import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Self

from shardwise.errors import RecordError
from shardwise.run import eventlog
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic

LAUNCH_DIR = "launch"
LAUNCH_JSON = "launch.json"
CHAIN_JSONL = "chain.jsonl"
#: Each launcher generation's own log: ``<run_dir>/logs/launch/<job id>.log``.
LOG_DIR = Path("logs") / "launch"


def chain_name(run_dir: Path) -> str:
    """The SLURM job name of every launcher of this run: one per run directory, so that
    ``--dependency=singleton`` (one running job per name and user) runs one at a time."""
    digest = hashlib.sha256(str(Path(run_dir).resolve()).encode("utf-8")).hexdigest()
    return f"shardwise-launch-{digest[:12]}"


@dataclass(frozen=True, kw_only=True)
class Launch:
    """``launch.json``: the launcher job every generation submits as its successor."""

    name: str  # the chain's SLURM job name (chain_name)
    workdir: str  # where snakemake runs (the directory `shardwise launch` ran in)
    python: str  # the interpreter that runs `shardwise` and `snakemake` in the job
    snakemake_args: tuple[str, ...]
    time_minutes: int
    stop_before_seconds: int  # the walltime signal's lead: snakemake is stopped then
    cpus: int
    mem_mb: int
    partition: str = ""
    account: str = ""
    created_at: str = ""
    stopped_at: str | None = None  # `launch --stop`: no generation starts snakemake again

    def to_json(self) -> bytes:
        """The file content."""
        return json_bytes(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Every field checked; RecordError naming the file and the field."""
        launch = Fields.parse(raw, where).into(cls)
        if launch.time_minutes <= 0 or launch.cpus <= 0 or launch.mem_mb <= 0:
            raise RecordError(where, "time_minutes, cpus and mem_mb must be positive")
        return launch

    def stopped(self, at: str) -> Self:
        """The same request, stopped at ``at``."""
        return dataclasses.replace(self, stopped_at=at)


class Step(StrEnum):
    """What a generation did."""

    SUBMITTED = "submitted"  # `shardwise launch` submitted the first generation
    STARTED = "started"  # a generation started (its job id, its node)
    SUCCESSOR = "successor"  # the launchers queued behind it (detail: their job ids)
    WAITING = "waiting"  # an orphan on another host holds the run: waited for
    NO_SUCCESSOR = "no_successor"  # sbatch refused the successor: the chain ends with it
    STOPPING = "stopping"  # its walltime signal (or a cancel) came: snakemake killed
    PROGRESS = "progress"  # snakemake failed after labelling more: the successor goes on
    COMPLETE = "complete"  # snakemake finished every target: successor cancelled
    ENDED = "ended"  # snakemake failed with no progress: the chain ends, successor cancelled
    STOPPED = "stopped"  # `launch --stop` (or a generation that found the chain stopped)


@dataclass(frozen=True, kw_only=True)
class ChainEvent:
    """One line of ``chain.jsonl``."""

    at: str  # ISO time, local
    job_id: str  # the launcher job the event is about ("" for `launch --stop`)
    step: str  # a Step
    host: str = ""
    detail: str = ""  # a job id (successor), an exit status, ...
    text: str = ""  # the line the launcher printed

    def to_json(self) -> str:
        """One line of JSON."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, line: str, where: str) -> Self:
        """One line; RecordError when it is torn or foreign."""
        event = Fields.parse(line, where).into(cls)
        if event.step not in set(Step):
            raise RecordError(where, f"field 'step' must be one of {sorted(Step)}")
        return event


def launch_path(run_dir: Path) -> Path:
    """``<run_dir>/launch/launch.json``."""
    return Path(run_dir) / LAUNCH_DIR / LAUNCH_JSON


def chain_path(run_dir: Path) -> Path:
    """``<run_dir>/launch/chain.jsonl``."""
    return Path(run_dir) / LAUNCH_DIR / CHAIN_JSONL


def log_path(run_dir: Path) -> Path:
    """The ``sbatch --output`` of every generation (``%j``: its job id). Its folder is made
    here: SLURM makes none, and a job whose output cannot be opened dies at launch."""
    folder = Path(run_dir) / LOG_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "%j.log"


def load(run_dir: Path) -> Launch | None:
    """The chain's request; None when ``shardwise launch`` never ran for this run."""
    path = launch_path(run_dir)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return Launch.from_json(raw, str(path))


def save(run_dir: Path, launch: Launch) -> None:
    """Write ``launch.json`` whole."""
    path = launch_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, launch.to_json())


def append(run_dir: Path, event: ChainEvent) -> None:
    """Add one event (a line written whole by one ``write``; readers skip a torn one)."""
    eventlog.append(chain_path(run_dir), event.to_json())


def events(run_dir: Path) -> list[ChainEvent]:
    """Every readable event, oldest first (none when the file is absent)."""
    return eventlog.read(chain_path(run_dir), ChainEvent.from_json)
