"""``shardwise adopt``: wait for the jobs a restarted workflow adopted (its ``adopt`` rule)."""

import argparse
import dataclasses
import os
from pathlib import Path

from shardwise.cli.common import add_run_dir
from shardwise.errors import ConfigError
from shardwise.run import claims
from shardwise.run.adoption import adoption_path, read_adoption
from shardwise.runtime import adopt
from shardwise.store.atomic import json_bytes, write_atomic

#: Exit status when the workflow that started the wait died first (nothing to finish).
EXIT_ORPHANED = 3


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``adopt``."""
    p = sub.add_parser(
        "adopt",
        help="wait for the live jobs of an earlier invocation (the adopt rule)",
        description="Keep the jobs an earlier invocation of this run left running or pending "
        "(claims/adopted.json, written by the dry run of the workflow that adopted them) "
        "until each has ended: a preempted, held or vanished one is acted on as the workflow "
        "does for its own. What the workflow's adopt checkpoint runs; it then labels what "
        "they left.",
    )
    add_run_dir(p, "adopt")
    p.add_argument(
        "--holder",
        default=None,
        help="wait for this adopted holder only (a job id, or pid<pid>); default: every one",
    )
    p.add_argument(
        "--out", type=Path, required=True, help="the file to write once the holder(s) ended"
    )
    p.add_argument("--every", type=float, default=60.0, help="seconds between two looks")
    p.add_argument(
        "--main-pid", type=int, default=None, help="stop when this process (the workflow) dies"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Wait; write ``--out`` with what was left; 3 when the workflow died first."""
    adoption = read_adoption(args.run_dir)
    if adoption is None:
        path = adoption_path(args.run_dir)
        msg = f"{path}: no adoption recorded; the workflow writes it when it plans a run whose "
        raise ConfigError(msg + "shards live jobs of an earlier invocation hold")
    if args.holder is not None:
        mine = tuple(h for h in adoption.holders if h.key() == args.holder)
        if not mine:
            known = ", ".join(h.key() for h in adoption.holders) or "none"
            msg = f"{adoption_path(args.run_dir)}: no adopted holder {args.holder!r} "
            raise ConfigError(msg + f"(adopted: {known})")
        adoption = dataclasses.replace(adoption, holders=mine)
    main = args.main_pid

    def main_alive() -> bool:
        return main is None or main == os.getpid() or claims.process_alive(main, None)

    waited = adopt.wait(args.run_dir, adoption, every=args.every, main_alive=main_alive)
    if waited.orphaned:
        return EXIT_ORPHANED
    body = {"jobs": waited.jobs, "processes": waited.processes, "left": list(waited.left)}
    write_atomic(args.out, json_bytes(body))
    return 0
