"""Operator views and repairs, one sub-package per family (each reads, computes, formats).

``common`` (text and pictures) is under every family; ``coverage``, ``domains``,
``walltime``, ``dolma`` and ``jobs`` stand on it; ``cluster``, ``verify``, ``select`` and
``report`` stand on those. No argparse, no exit codes, no printing (that is ``cli``).
Imports ``planner`` and below.
"""
