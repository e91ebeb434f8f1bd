# Pass 2 of `shardwise select` for one labelled shard, from its sidecars alone (no GPU):
# `shardwise select --plan-only ...` plans a selection, then `snakemake select_all`
# selects every planned selection's shards as jobs; `shardwise select --name N` reports.
rule select_shard:
    input:
        f"{RUN_DIR}/shards/{{shard}}.done",
    output:
        f"{RUN_DIR}/selections/{{name}}/shards/{{shard}}.json",
    log:
        f"{RUN_DIR}/logs/select/{{name}}/{{shard}}.log",
    wildcard_constraints:
        name=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    conda:
        "../envs/shardwise.yaml"
    resources:
        **slurm_site_resources(),
        mem_mb=2000,
        runtime=30,
    params:
        run_dir=run_dir_of_selection,
    shell:
        "shardwise select --run-dir {params.run_dir:q} --name {wildcards.name:q}"
        " --shard {wildcards.shard} 2> {log:q}"


rule select_all:
    input:
        selection_targets(RUN_DIR),
