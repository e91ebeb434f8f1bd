"""What a dry run prints after planning: the planner's notes, coverage, domains, in flight."""

from shardwise.ops.coverage import compute as coverage
from shardwise.ops.coverage.render import format_table
from shardwise.ops.domains import render as domains_format
from shardwise.planner.prepare import RunInfo


def report_lines(info: RunInfo) -> list[str]:
    """The planning report of a top-level process, line by line (printed once, before
    Snakemake schedules): re-pin changes and notes on the listing, the coverage table,
    the largest labels so far, and the shards live jobs hold."""
    lines = list(info.messages)
    cov = coverage.compute(coverage.load_state(info.run_dir))
    lines += format_table(cov).splitlines()
    headline = domains_format.headline(info.run_dir)  # the largest topics and formats so far
    if headline:
        lines.append(headline)
    return [*lines, *info.in_flight_lines]
