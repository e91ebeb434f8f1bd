"""shardwise: hash-sharded GPU labelling of web corpora."""

__version__ = "0.1.0"
