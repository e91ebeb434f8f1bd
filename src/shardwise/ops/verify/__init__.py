"""``shardwise verify``: check every marker against its outputs, report, repair."""
