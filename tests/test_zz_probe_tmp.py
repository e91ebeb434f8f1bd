from test_storage_s3_workflow import *  # noqa
from test_storage_s3_workflow import tiny_corpus, upload, write_config, summary, assert_outputs_exact
from e2e import run_snakemake

def test_probe_snapshot(tmp_path, demo_models, s3):
    n = 1000
    upload(s3, tiny_corpus(n))
    config = write_config(tmp_path, s3, demo_models, total_shards=2)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "output-markers.txt").write_text("")  # what the lead's wiring will write
    s3.reset()
    run_snakemake(config, timeout=1200)
    print("\nWITH SNAPSHOT first run:", summary(s3.counts()))
    kinds = Counter((r.kind, r.key.rsplit(".",1)[-1] if r.key else "", r.status) for r in s3.server.log(s3.name))
    print(kinds)
    s3.reset()
    run_snakemake(config)
    print("rerun detail:", [(r.kind, r.key, r.status) for r in s3.server.log(s3.name)])
