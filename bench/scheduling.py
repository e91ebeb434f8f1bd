"""One scheduling round of Snakemake's greedy scheduler at a campaign's number of ready jobs.

Each round, Snakemake (9.27) asks its scheduler which of the ready jobs to submit into the
free slots (``jobs`` minus those running). The greedy scheduler picks one job per step
and looks at every ready job at each step: a round costs about ready x free slots. With
``--scheduler-subsample N`` it looks at N ready jobs drawn at random instead, which is
harmless here (every classify job is alike, and every shard a random sample).

This times ``select_jobs`` of Snakemake's own greedy scheduler, fed ready jobs shaped as
the classify rule's group jobs are on the cluster (``_cores``, ``_nodes`` and
``_job_count`` 1 each: ``gpu`` is scoped local; the same priority, no input), for each
number of ready jobs, with no subsample and with the profile's, and prints seconds per
round and their ratio. The drawing of the subsample is timed too (Snakemake does it in
the same round).

    python bench/scheduling.py                               # 3,000 / 25,000 / 30,000 ready
    python bench/scheduling.py --ready 2000 --free 50        # CI's smoke
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass, field

from snakemake.scheduling.greedy import Scheduler, SchedulerSettings

#: What the profile sets (profiles/slurm/config.yaml, scheduler-subsample).
PROFILE_SUBSAMPLE = 1000


@dataclass(eq=False)
class ReadyJob:
    """What the greedy scheduler reads of a ready (group) job of the classify rule."""

    jobid: int
    scheduler_resources: dict[str, int] = field(
        default_factory=lambda: {"_cores": 1, "_nodes": 1, "_job_count": 1}
    )
    priority: int = 0
    input: tuple = ()


class _Logger:
    def debug(self, *args, **kwargs) -> None: ...

    info = warning = debug


def one_round(ready: int, free: int, subsample: int | None, seed: int = 0) -> tuple[float, int]:
    """Seconds of one round (the subsample drawn, then the selection) and jobs selected."""
    jobs = [ReadyJob(i) for i in range(ready)]
    scheduler = Scheduler(None, SchedulerSettings(), _Logger())
    resources = {"_cores": 10**9, "_nodes": free, "_job_count": free}
    rng = random.Random(seed)
    t0 = time.perf_counter()
    pool = rng.sample(jobs, k=subsample) if subsample and ready > subsample else jobs
    chosen = scheduler.select_jobs(pool, jobs, resources, {})
    return time.perf_counter() - t0, len(chosen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ready", default="3000,25000,30000", help="ready jobs per cell, comma list")
    ap.add_argument("--free", type=int, default=450, help="free slots (the profile's jobs)")
    ap.add_argument("--subsample", type=int, default=PROFILE_SUBSAMPLE)
    args = ap.parse_args()
    sizes = [int(x) for x in args.ready.split(",")]
    print(f"greedy scheduler, one round into {args.free} free slots (one run each)")
    print(
        f"{'ready jobs':>12}  {'no subsample':>14}  {'subsample ' + str(args.subsample):>16}  ratio"
    )
    for ready in sizes:
        full, n_full = one_round(ready, args.free, None)
        sub, n_sub = one_round(ready, args.free, args.subsample)
        assert n_full == n_sub == min(args.free, ready), (n_full, n_sub)
        print(f"{ready:>12,}  {full:>12.3f} s  {sub:>14.3f} s  {full / sub:>5.1f}x")


if __name__ == "__main__":
    main()
