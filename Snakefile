# shardwise: hash-sharded GPU labelling of web corpora.
#
# Table of contents: validate the config, plan (or, inside a cluster job, read)
# the run, declare one target per logical shard, include the rules.
# All logic lives in the `shardwise` package (src/shardwise/).
from snakemake.utils import min_version, validate

from shardwise.snakefile import (
    Runtime,
    Submitter,
    is_dry_run,
    prepare_run,
    reject_secret_keys,
    selection_targets,
    show_submit_errors,
)

min_version("9.0")


# The demo config, unless the user gave their own (--configfile replaces it whole).
if not workflow.config_settings.configfiles:

    configfile: "config/config.yaml"


# Secret-looking storage keys are refused before the schema, whose errors echo values.
reject_secret_keys(config.get("storage"))
validate(config, "config/schema.yaml")

# Top-level process: lists the input once, pins run.json, caches the plan, prints
# coverage, leaves out shards that live jobs of an earlier invocation hold. Inside a
# cluster job: reads run.json only (no listing, no printing, no squeue).
RUN = prepare_run(
    config,
    main_process=workflow.is_main_process,
    dryrun=is_dry_run(workflow),
    submitter=Submitter.of(workflow) if workflow.is_main_process else None,
    exit_on_refusal=True,  # one line and exit 1, not Snakemake's frames of package code
)
# sbatch's own message when it refuses a group job (Snakemake drops it otherwise).
show_submit_errors(main_process=workflow.is_main_process)
RUN_DIR = str(RUN.run_dir)
# Beside the workflow (top-level process only): a failed shard's own reason on the console
# (a shared one stops the run), walltimes fitted to a hidden maintenance window
# (walltime.adapt), and the job keeper: preempted, held or vanished SLURM jobs requeued,
# retried or reported, so that none is waited for forever (docs/slurm.md, The job keeper).
# shardwise's executor finds it under this name and hosts it (shardwise/runtime/host.py);
# with another executor, onstart starts it.
RUNTIME = Runtime(workflow, config, RUN)


onstart:
    RUNTIME.start(workflow)


onsuccess:
    RUNTIME.stop()


onerror:
    RUNTIME.stop(failed=True)


# Several shards grouped into one SLURM job still ask for one GPU (see docs/slurm.md).
resource_scopes:
    gpu="local",


wildcard_constraints:
    shard=r"\d+",


include: "workflow/rules/common.smk"
include: "workflow/rules/classify.smk"
include: "workflow/rules/adopt.smk"
include: "workflow/rules/campaign.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/dolma.smk"
include: "workflow/rules/select.smk"


rule all:
    default_target: True
    input:
        RUN.targets(),
        RUN.when_settled(f"{RUN_DIR}/report/coverage.png"),
