"""Shared pytest setup: the moto S3 server fixtures live in ``tests/s3server.py``."""

pytest_plugins = ["s3server", "e2e"]
