# A campaign of several sites (campaign.site): a shard a live job of another site held
# when this invocation planned waits here, on this host, until that lease ends (released,
# or not renewed for campaign.lease_seconds); its shard job then labels what is left. The
# lowest priority: every free shard is labelled first.
rule await_lease:
    output:
        f"{RUN_DIR}/campaign/awaited/{{shard}}.json",
    log:
        f"{RUN_DIR}/logs/await_lease/{{shard}}.log",
    priority: -100
    localrule: True
    conda:
        "../envs/shardwise.yaml"
    params:
        run_dir=run_dir_of_awaited,
    shell:
        "shardwise await-lease --run-dir {params.run_dir:q} --shard {wildcards.shard}"
        " --out {output:q} 2>&1 | tee {log:q}"
