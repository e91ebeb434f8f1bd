# Dolma attributes of a labelled shard, from its sidecars alone (no GPU, no document read):
# `snakemake dolma_all` writes every missing one, as jobs on a cluster too.
rule dolma_export:
    input:
        f"{RUN_DIR}/shards/{{shard}}.done",
    output:
        f"{RUN_DIR}/dolma/{{shard}}.done",
    log:
        f"{RUN_DIR}/logs/dolma/{{shard}}.log",
    conda:
        "../envs/shardwise.yaml"
    resources:
        **slurm_site_resources(),
        mem_mb=2000,
        runtime=30,
    params:
        run_dir=run_dir_of_output,
    shell:
        "shardwise dolma export --run-dir {params.run_dir:q}"
        " --shard {wildcards.shard} 2> {log:q}"


rule dolma_all:
    input:
        expand(f"{RUN_DIR}/dolma/{{shard}}.done", shard=RUN.shards),
