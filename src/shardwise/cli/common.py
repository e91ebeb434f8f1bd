"""What several verbs share: ``--run-dir``, ``--format`` (one vocabulary: ``table``, ``json``,
``markdown``, ``csv``; ``text`` is read as ``table``), number types, and the one way a
result is printed (:func:`emit`: one JSON object, keys sorted; docs/schemas/)."""

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from shardwise.errors import ShardwiseError
from shardwise.planner import campaign
from shardwise.run import opened, runjson

#: The output formats, in the order ``--help`` lists them.
FORMATS = ("table", "json", "markdown", "csv", "weborganizer")
#: Older spellings still accepted.
FORMAT_ALIASES = {"text": "table"}


def json_text(doc: Mapping[str, Any], *, one_line: bool = False) -> str:
    """A verb's JSON document: sorted keys, indent 2 (``one_line`` for JSON Lines)."""
    return json.dumps(doc, indent=None if one_line else 2, sort_keys=True, default=str)


def emit(fmt: str, doc: Callable[[], Mapping[str, Any]], text: Callable[[str], str]) -> None:
    """Print a verb's result: ``json`` from its document, any other format from its text
    (both made from the same typed result, by ops)."""
    out = json_text(doc()) if fmt == "json" else text(fmt)
    if out:  # an empty text (nothing to list) prints no blank line
        print(out)


def positive_int(text: str) -> int:
    """An argparse type: an integer > 0 (usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def add_run_dir(parser: argparse.ArgumentParser, command: str | None = None) -> None:
    """``--run-dir DIR`` (required): the run directory that holds run.json; with
    ``command``, ``main`` refuses one that holds none (exit 2) before the verb runs."""
    parser.set_defaults(planned_run=command)
    parser.add_argument(
        "--run-dir",
        required=True,
        type=Path,
        help="the run directory (the one holding run.json, plan.parquet and shards/)",
    )


def add_format(
    parser: argparse.ArgumentParser, choices: Sequence[str] = ("table", "json"), help: str = ""
) -> None:
    """``--format`` with the shared vocabulary, limited to what this verb can print."""
    unknown = [c for c in choices if c not in FORMATS]
    if unknown:
        raise ValueError(f"unknown output format(s) {unknown}; the vocabulary is {FORMATS}")

    def fmt(text: str) -> str:
        return FORMAT_ALIASES.get(text, text)

    parser.add_argument(
        "--format",
        type=fmt,
        choices=tuple(choices),
        default="table",
        help=help or f"output format: {', '.join(choices)} (default table)",
    )


def regex(text: str) -> str:
    """An argparse type: a regular expression that compiles (usage error otherwise)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {exc}") from None
    return text


def add_coverage_options(parser: argparse.ArgumentParser) -> None:
    """``--gpus`` and ``--category-regex``: how coverage and the report count and project."""
    parser.add_argument(
        "--gpus",
        type=positive_int,
        default=None,
        help="GPUs for the ETA (default: what the run's last snakemake could run at once: "
        "--jobs on SLURM, --cores locally; 1 before any)",
    )
    parser.add_argument(
        "--category-regex",
        type=regex,
        default=None,
        help="derive categories from file paths (first group, else whole match)",
    )


def not_a_run_dir(run_dir: Path, command: str) -> bool:
    """Say so on stderr (for exit 2) when ``run_dir`` holds no run.json: either it is not
    a run directory, or the run was never planned; say what to run first."""
    if runjson.local_path(run_dir).is_file():
        return False
    where = "does not exist" if not run_dir.exists() else "has no run.json"
    msg = f"shardwise {command}: {run_dir} {where}: this run was never planned there. "
    msg += "Run `snakemake -n` (or `shardwise plan --configfile <config>`) first, or pass the "
    msg += "original run directory (the one holding run.json, plan.parquet and shards/)"
    print(msg, file=sys.stderr)
    return True


def bring_in_campaign(run_dir: Path) -> None:
    """At a campaign site, first bring what the other sites finished into this run
    directory (``planner/campaign.py`` ``bring_in``), said on stderr, so that the command
    answers for the whole campaign; nothing elsewhere, nor where ``run_dir`` is not a run
    (the command itself says so)."""
    try:
        ctx = opened.open_run(Path(run_dir))
    except ShardwiseError:
        return
    site = ctx.settings.campaign.site if ctx.settings is not None else None
    for line in campaign.bring_in(ctx).lines(site):
        print(line, file=sys.stderr)
