# A restarted workflow adopts the live jobs of an earlier invocation (planned into
# claims/adopted.json): this local job keeps them until each has ended, as the workflow
# keeps its own; the shards they leave are then labelled in this same invocation. Its
# lines go to the console (where the operator looks) and to its log.
checkpoint adopt:
    output:
        RUN.adoption_end(),
    log:
        f"{RUN_DIR}/logs/adopt.log",
    localrule: True
    conda:
        "../envs/shardwise.yaml"
    params:
        run_dir=run_dir_of_adoption,
        every=config["failures"]["watch_seconds"],
        main_pid=RUN.main_pid,
    shell:
        "shardwise adopt --run-dir {params.run_dir:q} --out {output:q}"
        " --every {params.every} --main-pid {params.main_pid} 2>&1 | tee {log:q}"
