# Input functions and resource callables: thin wrappers over the package.
from pathlib import Path

from shardwise.snakefile import classify_group_size, runtime_minutes_for, site_resources


def run_dir_of_output(wildcards, output):
    """The run directory, from an output two levels below it (<run_dir>/shards/<shard>.done)."""
    return str(Path(output[0]).parent.parent)


def run_dir_of_adoption(wildcards, output):
    """The run directory, from the adopt job's output (<run_dir>/claims/adopted/<token>/<holder>.json)."""
    return str(Path(output[0]).parents[3])


def run_dir_of_awaited(wildcards, output):
    """The run directory, from an await job's output (<run_dir>/campaign/awaited/<shard>.json)."""
    return str(Path(output[0]).parents[2])


def awaited_lease(wildcards):
    """A shard another site held at planning waits for its lease first (none: [])."""
    return RUN.awaited(int(wildcards.shard))


def shard_priority(wildcards):
    """0 for one site; in a campaign this site's own order of the shards."""
    return RUN.priority(int(wildcards.shard))


def run_dir_of_selection(wildcards, output):
    """The run directory, from a selection's shard record (<run_dir>/selections/<name>/shards/<shard>.json)."""
    return str(Path(output[0]).parents[3])


def classify_resource(name):
    """A classify resource from config (defaults filled in by the schema)."""
    return config["resources"]["classify"][name]


def classify_runtime(wildcards, attempt):
    """Walltime in minutes for one shard, from measured speed (see planner/walltime.py)."""
    return runtime_minutes_for(
        config,
        int(wildcards.shard),
        attempt,
        main_process=workflow.is_main_process,
        group=classify_group_size(workflow),
    )


def slurm_site_resources():
    """Partition, constraint, QOS from $SHARDWISE_SLURM_* when set (see slurm/profile.py)."""
    return site_resources()


def adopted_wait(wildcards):
    """An adopted shard waits for the adopt job of the holder that held it."""
    return RUN.holder_end(int(wildcards.shard))


def classify_group(wildcards):
    """The classify job's group: "classify" (K shards per SLURM job), or, for a shard an
    adopted job held, "classify_adopted" (alone: it waits for that job's end)."""
    return RUN.group(int(wildcards.shard))
