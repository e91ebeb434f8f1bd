"""At parse time: list, pin and plan a run; shards in flight; walltimes. Prints nothing.

Imports ``classify`` (the model check before pinning), ``run`` and below.
"""
