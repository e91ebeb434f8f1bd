"""Asking SLURM: the only place shardwise runs SLURM commands, and what their answers mean.

Imports only ``shardwise.errors`` and ``shardwise.config``.
"""
