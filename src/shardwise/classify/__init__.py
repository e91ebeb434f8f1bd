"""Inside a shard job: label one shard's files (the engine, models, tokenization, batching).

The only torch importers besides ``demo.tinymodels``. Imports ``run`` and below.
"""
