# The run's picture, after every shard is done; `snakemake --report` includes it.
rule report:
    input:
        RUN.targets(),
    output:
        html=f"{RUN_DIR}/report/coverage.html",
        png=report(
            f"{RUN_DIR}/report/coverage.png",
            caption="../report/coverage.rst",
            category="Coverage",
        ),
        domains=report(
            f"{RUN_DIR}/report/domains.png",
            caption="../report/domains.rst",
            category="Domains",
        ),
    log:
        f"{RUN_DIR}/logs/report.log",
    localrule: True
    conda:
        "../envs/shardwise.yaml"
    params:
        run_dir=run_dir_of_output,
    shell:
        "shardwise report --run-dir {params.run_dir:q}"
        " --out {output.html:q} --png {output.png:q}"
        " --domains-png {output.domains:q} --require-complete 2> {log:q}"
