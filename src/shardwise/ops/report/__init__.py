"""``shardwise report``: one picture and a self-contained HTML page of a run."""
