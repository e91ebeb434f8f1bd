"""``shardwise select``: weights to a selection plan, the files it keeps, its report,
reweighting."""
