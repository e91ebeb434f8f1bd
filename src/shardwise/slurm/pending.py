"""Why a job pends, in one plain sentence, and what to do about it.

SLURM shows one reason per pending job: the one its last scheduling pass hit
(SchedMD, "Job Reason Codes"), so a reason describes a moment, not a verdict;
``ReqNodeNotAvail`` in particular can flicker during long backfill cycles on big
systems, so act on a reason that persists. Unknown reasons are shown verbatim.
"""

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

SCHEDMD = "https://slurm.schedmd.com/job_reason_codes.html"


@dataclass(frozen=True, kw_only=True)
class Explanation:
    """What a pending reason means for this run."""

    reason: str  # as SLURM printed it
    meaning: str  # one plain sentence
    action: str  # what to do
    known: bool = True
    never_starts: bool = False  # it cannot start without a change


@cache
def _table() -> tuple[tuple[re.Pattern[str], str, str, bool], ...]:
    """The reasons shardwise explains (package data ``pending-reasons.yaml``, first match
    wins), compiled once."""
    text = resources.files("shardwise").joinpath("data/pending-reasons.yaml").read_text("utf-8")
    rows = yaml.safe_load(text)
    return tuple(
        (re.compile(r["pattern"]), r["meaning"], r["action"], r["never_starts"]) for r in rows
    )


def explain(reason: str) -> Explanation:
    """The explanation of one pending reason (verbatim when unknown)."""
    text = " ".join((reason or "").strip().strip("()").split())
    for pattern, meaning, action, never in _table():
        if pattern.search(text):
            return Explanation(
                reason=text, meaning=meaning, action=action, known=True, never_starts=never
            )
    meaning = f"SLURM's reason, shown as it is: shardwise has no explanation for it ({SCHEDMD})."
    action = "Look it up in SchedMD's 'Job Reason Codes'."
    return Explanation(reason=text or "(none)", meaning=meaning, action=action, known=False)


def waits_for_reservation(reason: str) -> bool:
    """Whether a pending reason says the job waits for a reservation (a maintenance
    window: ``ReqNodeNotAvail, Reserved for maintenance``; ``Reservation``), not for nodes
    "reserved for jobs in higher priority partitions" (backfill's own plan)."""
    text = reason.lower()
    return "maint" in text or "reservation" in text
