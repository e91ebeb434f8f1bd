# A restarted workflow adopts the live jobs of an earlier invocation (planned into
# claims/adopted.json): one local job per adopted job keeps it until it has ended, as the
# workflow keeps its own; its shards' classify jobs then label what it left at
# once, in this same invocation, while the other adopted jobs still run (no checkpoint:
# a DAG that changes mid-run regroups running group jobs). Each counts against `jobs`
# (every job takes one of Snakemake's node slots). Its lines go to the console (where
# the operator looks) and to its log.
rule adopt:
    output:
        RUN.adoption_end(),
    log:
        f"{RUN_DIR}/logs/adopt/{{holder}}.log",
    localrule: True
    conda:
        "../envs/shardwise.yaml"
    params:
        run_dir=run_dir_of_adoption,
        every=config["failures"]["watch_seconds"],
        main_pid=RUN.main_pid,
    shell:
        "shardwise adopt --run-dir {params.run_dir:q} --holder {wildcards.holder}"
        " --out {output:q} --every {params.every} --main-pid {params.main_pid}"
        " 2>&1 | tee {log:q}"
