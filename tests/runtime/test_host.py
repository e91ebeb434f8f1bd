"""The runtime's host (``runtime/host.py``): what it reads of the workflow before a job runs."""

from types import SimpleNamespace

from snakemake.resources import Resources

from shardwise.planner import walltime
from shardwise.runtime import host


def _workflow(default: list[str], classify: list[str] | None = None) -> SimpleNamespace:
    """A workflow's resource settings as Snakemake parses a profile's (expressions kept:
    their values are known only inside a rule)."""
    parse = lambda args: Resources.parse(args, allow_expressions=True)  # noqa: E731
    overwrite = {"classify": parse(classify)} if classify else {}
    return SimpleNamespace(
        resource_settings=SimpleNamespace(
            overwrite_resources=overwrite, default_resources=parse(default)
        )
    )


def test_the_stop_signals_lead_is_read_from_the_profile_before_any_rule_runs():
    """``slurm_extra`` as ``default-resources`` gives it (an expression: its ``value``
    raises outside a rule, which once stopped the walltime adaptation's start)."""
    ninety, longer = "slurm_extra=\"'--signal=TERM@90'\"", "slurm_extra=\"'--signal=TERM@300'\""
    assert host.signal_lead_s(_workflow([ninety])) == 90
    both = _workflow([ninety], [longer])
    assert host.signal_lead_s(both) == 300  # the classify rule's own, from set-resources
    assert host.signal_lead_s(_workflow(["mem_mb=100"])) == walltime.SIGNAL_LEAD_S
    assert host.signal_lead_s(SimpleNamespace()) == walltime.SIGNAL_LEAD_S
