"""Run one SLURM client command with a timeout, and parse its machine-readable replies.

Every SLURM call goes through :func:`run`: a missing command, one that hangs (``sacct``
without accounting, a dead controller), a non-zero exit and data hidden by
``PrivateData`` all come back as a :class:`Reply` whose ``problem`` is one line a
person can act on, never an exception or a hang. The parsers never run anything.
"""

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

#: Seconds any one SLURM command may take. A healthy controller answers in well under
#: a second; sacct against a dead slurmdbd waits for minutes.
DEFAULT_TIMEOUT = 20.0
#: What SLURM prints when PrivateData hides something from this user.
_HIDDEN = re.compile(r"access/permission denied|permission denied|not authorized", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What one SLURM command said. ``problem`` is None when it answered normally."""

    argv: tuple[str, ...]
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = 0
    problem: str | None = None
    kind: str = "ok"  # ok | missing | timeout | failed | hidden

    @property
    def ok(self) -> bool:
        """True when the command ran and exited 0."""
        return self.problem is None

    @property
    def command(self) -> str:
        """The command line, for messages."""
        return " ".join(self.argv)


def run(
    argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, env: dict[str, str] | None = None
) -> Reply:
    """Run ``argv`` (a SLURM client command) and say what happened, in one value. Callers
    pass their own ``-o``/``--format``, so a site's ``SLURM_*`` formats do not matter."""
    argv = tuple(argv)
    name, line = argv[0], " ".join(argv)
    if shutil.which(name) is None:
        why = f"`{name}` is not installed or not on PATH (run this on a login node)"
        return Reply(argv=argv, returncode=None, kind="missing", problem=why)
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        why = f"`{line}` did not answer within {timeout:g} s"
        return Reply(argv=argv, returncode=None, kind="timeout", problem=why)
    except OSError as e:
        return Reply(
            argv=argv, returncode=None, kind="failed", problem=f"`{name}` failed to start: {e}"
        )
    if proc.returncode != 0:
        text = " ".join((proc.stderr or proc.stdout).split()) or "no message"
        kind = "hidden" if _HIDDEN.search(text) else "failed"
        why = f"`{line}` exited {proc.returncode}: {text}"
        return Reply(
            argv=argv,
            stdout=proc.stdout,
            stderr=proc.stderr,
            returncode=proc.returncode,
            problem=why,
            kind=kind,
        )
    return Reply(argv=argv, stdout=proc.stdout, stderr=proc.stderr, returncode=proc.returncode)


def rows(text: str, names: Sequence[str], sep: str = "|") -> list[dict[str, str]]:
    """Rows of a ``-h -o 'a|b|c'`` or ``--parsable2`` reply as dicts keyed by ``names``;
    the last field may hold ``sep`` itself (a comment), lines with fewer fields are skipped."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(sep, len(names) - 1)
        if len(parts) < len(names):
            continue
        out.append({n: p.strip() for n, p in zip(names, parts, strict=True)})
    return out


_KV = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=")


def key_values(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value 2`` (one ``scontrol -o`` record) as a dict; a value may hold
    spaces (``Reason=ReqNodeNotAvail, Reserved for maintenance``) up to the next `` Key=``."""
    matches = list(_KV.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def config_values(text: str) -> dict[str, str]:
    """``scontrol show config`` (``Key = value`` lines) as a dict."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def is_null(value: str | None) -> bool:
    """SLURM's spellings of "no value"."""
    return value is None or value.strip() in {"", "(null)", "N/A", "None", "n/a", "Unknown"}


def minutes(value: str | None) -> int | None:
    """A SLURM duration (``30``, ``1:00:00``, ``2-12:00:00``) in minutes; None for
    unlimited or unparseable ("no limit"). ``M:SS`` is minutes and seconds, as squeue says."""
    if is_null(value):
        return None
    text = str(value).strip()
    if text.upper() in {"UNLIMITED", "INFINITE", "INVALID", "NOT_SET"}:
        return None
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        if not d.isdigit():
            return None
        days = int(d)
        if ":" not in text:
            text = f"{text}:00:00"
    parts = text.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    nums = [int(p) for p in parts]
    if len(nums) == 1:
        total = nums[0]
    elif len(nums) == 2:  # M:SS, or H:MM after a day part
        total = nums[0] * 60 + nums[1] if days else nums[0] + (1 if nums[1] else 0)
    else:
        h, m, s = nums
        total = h * 60 + m + (1 if s else 0)
    return days * 1440 + total


def timestamp(value: str | None) -> datetime | None:
    """``2026-12-01T06:17:22`` (local time, as SLURM prints it) or None."""
    if is_null(value):
        return None
    try:
        return datetime.fromisoformat(str(value).strip())
    except ValueError:
        return None


def count(value: str | None) -> int | None:
    """An integer limit (``500``), or None for unset/unlimited."""
    if is_null(value):
        return None
    text = str(value).strip()
    return int(text) if text.isdigit() else None


def seconds(value: str | None) -> int | None:
    """A duration SLURM prints as ``[D-]HH:MM:SS`` or ``MM:SS`` (sacctmgr's GraceTime), or
    plain seconds (``scontrol``'s), in seconds; None when unset or unreadable."""
    if is_null(value):
        return None
    text = str(value).strip()
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if (days and not days.isdigit()) or not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    total = 0
    for p in parts:
        total = total * 60 + int(p)
    return total + int(days or 0) * 86400
