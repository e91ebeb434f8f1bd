"""At parse time: list, pin and plan a run; shards in flight; walltimes; the re-pin of a
relocated output. Prints nothing.

Imports ``classify`` (the model check before pinning), ``run`` and below.
"""
