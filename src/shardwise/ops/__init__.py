"""Operator views: compute and format coverage, domains, verify, the report, cluster views.

No argparse, no exit codes, no printing (that is ``cli``). Imports ``planner`` and below.
"""
