# One job per logical shard; the package does the work (shell, not script:, so an
# edit of the code never re-runs finished shards).
rule classify:
    input:
        awaited_lease,
        adopted_wait,
    output:
        f"{RUN_DIR}/shards/{{shard}}.done",
    log:
        f"{RUN_DIR}/logs/classify/{{shard}}.log",
    benchmark:
        f"{RUN_DIR}/benchmarks/classify/{{shard}}.tsv"
    priority: shard_priority
    # K shards per SLURM job (the profile's group-components); a shard an adopted job of
    # an earlier invocation held waits for that job (adopted_wait) in a group of its own,
    # so the other shards never wait for it.
    group:
        classify_group
    conda:
        "../envs/shardwise.yaml"
    # Snakemake exports OMP_NUM_THREADS=threads to the job: torch's CPU threads.
    threads: classify_resource("cpus_per_task")
    # Site values from $SHARDWISE_SLURM_PARTITION/_CONSTRAINT/_QOS, only when set.
    resources:
        **slurm_site_resources(),
        gpu=classify_resource("gpu"),
        cpus_per_task=classify_resource("cpus_per_task"),
        mem_mb=classify_resource("mem_mb"),
        runtime=classify_runtime,
    params:
        run_dir=run_dir_of_output,
    shell:
        "shardwise classify-shard --run-dir {params.run_dir:q}"
        " --shard {wildcards.shard} 2> {log:q}"
