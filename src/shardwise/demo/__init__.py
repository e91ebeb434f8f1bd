"""The built-in demo: a small corpus and tiny offline classifiers (random weights).

Imports ``store`` only (and torch/transformers in ``tinymodels``).
"""
