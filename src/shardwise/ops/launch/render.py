"""The launcher chain as text: ``launch --status`` and what ``launch --stop`` did."""

from shardwise.ops.launch.chain import ChainStatus, State, Stopped
from shardwise.run import launch as record

#: What each state means for the operator, and what to do.
ADVICE = {
    State.RUNNING: "a launcher runs the workflow; nothing to do",
    State.QUEUED: "a launcher waits to start (its predecessor ending, or resources)",
    State.COMPLETE: "the campaign is complete: the last launcher cancelled the queued ones",
    State.STOPPED: "stopped by `shardwise launch --stop`; `shardwise launch` starts a new chain",
    State.ENDED: "a launcher ended the chain (its last line says why); fix that, then "
    "`shardwise launch` again",
    State.BROKEN: "no launcher is running or queued, yet the campaign is not complete: "
    "`shardwise launch` again starts a new chain, which adopts the live shard jobs",
    State.NONE: "no launcher chain was started for this run (`shardwise launch`)",
}


def status_text(st: ChainStatus) -> str:
    """The chain: request, each generation and what it did last, live jobs, the state."""
    lines = [f"launcher chain of {st.run_dir}: {st.state} ({ADVICE[st.state]})"]
    if st.launch is None:
        return lines[0]
    req = st.launch
    where = f", partition {req.partition}" if req.partition else ""
    where += f", account {req.account}" if req.account else ""
    lines.append(
        f"  job name {req.name}: {req.time_minutes} min, {req.cpus} CPU(s), {req.mem_mb} MB"
        f"{where}; snakemake stopped {req.stop_before_seconds} s before each walltime"
    )
    lines.append(f"  snakemake {' '.join(req.snakemake_args)}")
    lines += _generation_lines(st)
    running = sum(1 for j in st.shard_jobs if j.running)
    lines.append(
        f"  shard jobs of the run: {running} running, {len(st.shard_jobs) - running} queued; "
        f"{st.done_shards:,} shard(s) done"
    )
    if st.last is not None and st.state is State.ENDED:
        lines.append(f"  last: {st.last.text}")
    elif st.last is not None and st.state is State.BROKEN:
        lines.append(
            f"  last said (before every launcher ended; no launcher is queued now): {st.last.text}"
        )
    lines.append(f"  logs: {st.run_dir / record.LOG_DIR}/<job id>.log")
    return "\n".join(lines)


def _generation_lines(st: ChainStatus) -> list[str]:
    """Each generation, how it ended and what it said last; the queued launchers that
    never ran and how they ended; the live launcher jobs and what is queued behind."""
    live = {j.id for j in st.live}
    lines = []
    for n, g in enumerate(st.generations, 1):
        last = g.last.text if g.last is not None else ""
        how = f" [ended {st.ended[g.job_id]}]" if g.job_id in st.ended else ""
        how = " [running]" if g.job_id in live else how
        lines.append(
            f"  generation {n}: job {g.job_id} on {g.host} since {g.started_at}{how}: {last}"
        )
    started = {g.job_id for g in st.generations}
    never = {i: how for i, how in st.ended.items() if i not in started}
    if never:
        ordered = sorted(never.items(), key=lambda item: int(item[0]))
        said = ", ".join(f"{i} ({how})" for i, how in ordered)
        lines.append(f"  queued launchers that never ran: {said}")
    for job in st.live:
        why = f" ({job.reason})" if job.pending and job.reason else ""
        lines.append(f"  live: launcher job {job.id} {job.state}{why}")
    if st.state in (State.RUNNING, State.QUEUED):
        queued = ", ".join(j.id for j in st.queued) or "none"
        lines.append(f"  queued behind it: {queued}")
    return lines


def stopped_text(stopped: Stopped, run_dir_text: str) -> str:
    """What ``launch --stop`` did, and what happens to the shard jobs."""
    cancelled = ", ".join(f"{j.id} ({j.state.lower()})" for j in stopped.cancelled)
    head = f"stopped the launcher chain of {run_dir_text}: "
    head += f"cancelled launcher job(s) {cancelled}" if cancelled else "no launcher was live"
    if stopped.problem:
        head += f" (scancel said: {stopped.problem})"
    n = len(stopped.shard_jobs)
    if not n:
        return head + "; no shard job of the run is live"
    ids = " ".join(stopped.shard_jobs)
    tail = (
        f". The run's {n} shard job(s) keep running (a running launcher's snakemake is killed "
        "without cancelling them): they finish their shards, whose markers count; "
        "`shardwise launch` (or snakemake) later adopts those still live and labels the rest. "
        f"To stop labelling now as well: scancel {ids}"
    )
    return head + tail
