"""The run's files: one reader (and writer) for each file of the run directory and output root.

The hash rule, the input listing, run.json, the plan, markers, sidecars and stats, the
progress journal, summaries, quarantine, claims and failure records. Imports ``store``,
``slurm`` (claims ask squeue whether a holder lives), ``config`` and ``errors``.
"""
