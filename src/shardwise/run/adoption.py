"""``claims/adopted.json``: the live jobs of an earlier invocation that a restarted
workflow adopted (written at planning), and where each holder's ``adopt`` job records
its end (``claims/adopted/<token>/<holder>.json``), which its shards' classify jobs wait
for (``planner/prepare.py`` ``RunInfo``, ``runtime/adopt.py``)."""

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Self

from shardwise.run import claims
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes, write_atomic

#: The jobs of an earlier invocation the running workflow adopted (written at planning).
ADOPTED_JSON = "adopted.json"
#: Each adopted holder's end: its ``adopt`` job writes ``adopted/<token>/<holder>.json``.
ADOPTED_DIR = "adopted"


@dataclass(frozen=True, kw_only=True)
class Holder:
    """One live holder of shards that a restarted workflow waits for: a SLURM job, or a
    local process (an orphaned shard job of the local executor)."""

    shards: tuple[int, ...]
    job_id: str | None = None
    pid: int | None = None
    host: str = ""
    process: str | None = None

    def name(self) -> str:
        """``job 12`` / ``process 42 on laptop``, for messages."""
        return f"job {self.job_id}" if self.job_id else f"process {self.pid} on {self.host}"

    def key(self) -> str:
        """The holder's name in the adopt job's output: its job id, or ``pid<pid>``."""
        return self.job_id or f"pid{self.pid}"


@dataclass(frozen=True, kw_only=True)
class Adoption:
    """``claims/adopted.json``: what the invocation that planned at ``at`` adopted."""

    at: str
    token: str
    holders: tuple[Holder, ...] = ()

    def to_json(self) -> bytes:
        """The file content."""
        return json_bytes(asdict(self))

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Self:
        """Read ``claims/adopted.json``; RecordError naming a damaged field."""
        return Fields.parse(data, where).into(cls)  # each holder's shards: integers

    @property
    def shards(self) -> tuple[int, ...]:
        """Every adopted shard, ascending."""
        return tuple(sorted(s for h in self.holders for s in h.shards))


def adoption_path(run_dir: Path) -> Path:
    """``<run_dir>/claims/adopted.json``."""
    return Path(run_dir) / claims.CLAIMS_DIR / ADOPTED_JSON


def adoption_end_path(run_dir: Path, token: str, holder: str) -> Path:
    """What the holder's ``adopt`` job writes once the adopted ``holder`` has ended
    (``Holder.key``; ``{holder}``: the adopt rule's wildcard)."""
    return Path(run_dir) / claims.CLAIMS_DIR / ADOPTED_DIR / token / f"{holder}.json"


def read_adoption(run_dir: Path) -> Adoption | None:
    """The adoption the last planning wrote; None when there is none."""
    target = adoption_path(run_dir)
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        return None
    return Adoption.from_json(data, str(target))


def write_adoption(run_dir: Path, adoption: Adoption | None) -> None:
    """Replace ``claims/adopted.json`` (remove it when nothing is adopted), and drop the
    ends of earlier adoptions."""
    target = adoption_path(run_dir)
    if adoption is None:
        target.unlink(missing_ok=True)
    else:
        write_atomic(target, adoption.to_json())
    ends = Path(run_dir) / claims.CLAIMS_DIR / ADOPTED_DIR
    keep = None if adoption is None else adoption.token
    for old in ends.iterdir() if ends.is_dir() else ():
        if old.name == keep:
            continue
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)  # an end of the single checkpoint of older versions
