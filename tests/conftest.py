"""Shared pytest setup: the moto S3 server fixtures live in ``tests/s3server.py``."""

pytest_plugins = ["s3server", "e2e"]


def pytest_collection_modifyitems(config, items):
    """Skip ``cuda``-marked tests where torch has no usable CUDA device."""
    marked = [item for item in items if item.get_closest_marker("cuda")]
    if not marked:
        return
    import pytest
    import torch

    if torch.cuda.is_available():
        return
    reason = f"needs CUDA (torch {torch.__version__}, torch.version.cuda={torch.version.cuda})"
    for item in marked:
        item.add_marker(pytest.mark.skip(reason=reason))
