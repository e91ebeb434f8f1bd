# A restarted workflow adopts the live jobs of an earlier invocation (planned into
# claims/adopted.json): this local job keeps them until each has ended, as the workflow
# keeps its own; the shards they leave are then labelled in this same invocation.
checkpoint adopt:
    output:
        RUN.adoption_end(),
    localrule: True
    params:
        run_dir=RUN_DIR,
        every=config["failures"]["watch_seconds"],
        main_pid=RUN.main_pid,
    shell:
        "shardwise adopt --run-dir {params.run_dir:q} --out {output:q}"
        " --every {params.every} --main-pid {params.main_pid}"
