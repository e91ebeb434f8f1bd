"""Where bytes live: atomic local writes, one code path for local folders and object stores.

Imports only ``shardwise.errors`` and ``shardwise.config``.
"""
