"""``shardwise cluster``: facts and findings from SLURM, check (the overlay), status, retime."""
