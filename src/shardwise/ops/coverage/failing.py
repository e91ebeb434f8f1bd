"""Coverage's failing shards and files: grouped by the reason of each shard's newest
failure record, and the files those records name."""

from shardwise.run import failures


def reasons_of(
    records: dict[int, failures.FailureRecord], *, interrupted: bool, store: bool = False
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Failing shards grouped by the reason of their newest record, most shards first
    (``store``: those the store stopped, which are not failing: no file is at fault)."""
    by_reason: dict[str, list[int]] = {}  # in shard order
    for shard, record in sorted(records.items()):
        stopped = record.kind == "storage"
        if record.interrupted == interrupted and stopped == store:
            by_reason.setdefault(record.reason, []).append(shard)
    ordered = sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    return tuple((reason, tuple(shards)) for reason, shards in ordered)


def failing_files(records: dict[int, failures.FailureRecord]) -> tuple[tuple[str, int, str], ...]:
    """The files named by failing (not interrupted) shards' newest records, in file order
    (a shard stopped for a shared reason names no file: the reason is the whole story)."""
    out = [
        (f.file, shard, failures.first_line(f.error))
        for shard, record in records.items()
        if not record.interrupted and not record.shared and record.kind != "storage"
        for f in record.failed
    ]
    return tuple(sorted(out))
