"""``<run_dir>/benchmarks/classify/<shard>.tsv``: Snakemake's measure of each shard job.

The classify rule declares a ``benchmark:``; Snakemake writes one row per finished job:
``s``, the wall seconds of the shard job's command, start-up and model loading included
(what a file's ``seconds`` in its stats leaves out). The coverage ETA divides the work
left by this pace. A job that failed writes none; a retried shard's row is its last
attempt's.
"""

from pathlib import Path

from shardwise.run import markers

BENCHMARKS = Path("benchmarks") / "classify"


def shard_seconds(run_dir: Path) -> dict[int, float]:
    """Each benchmarked shard's wall seconds (one listing; unreadable rows are skipped)."""
    folder = Path(run_dir) / BENCHMARKS
    out: dict[int, float] = {}
    for shard in markers.numbered(folder, ".tsv"):
        try:
            lines = (folder / f"{shard}.tsv").read_text("utf-8").splitlines()
            head, row = lines[0].split("\t"), lines[1].split("\t")
            seconds = float(row[head.index("s")])
        except (OSError, IndexError, ValueError):
            continue
        if seconds >= 0:
            out[shard] = seconds
    return out
