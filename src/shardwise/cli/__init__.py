"""``shardwise <verb>``: argparse, exit codes and printing; one module per verb.

The top floor (beside ``shardwise.snakefile``): imports anything below, nothing imports it.
"""
