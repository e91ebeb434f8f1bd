"""The workflow's main process as a chain of SLURM CPU jobs (``shardwise launch``): each
launcher queues its successor when it starts, stops Snakemake before its walltime without
cancelling the shard jobs, and the last one, once the campaign is complete, removes its
successor. ``request`` builds what is submitted, ``chain`` starts, stops and reads the
chain, ``generation`` is one launcher job's body, ``render`` the status text."""
