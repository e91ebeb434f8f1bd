import pyarrow as pa

from shardwise.run import plan
from shardwise.run.sharding import shard_for_task


def files(n=20):
    return [(f"src/cat{i % 3}/part-{i:03d}.parquet", 100 + i) for i in range(n)]


def build(fs, total=7, per_task=1):
    return plan.build(
        fs,
        files_per_task=per_task,
        total_shards=total,
        minimum_shard_index=2,
        category_regex="^([^/]+/[^/]+)/",
    )


def test_plan_rows_follow_the_hash_rule():
    table = build(files())
    rows = table.to_pylist()
    assert [r["file"] for r in rows] == sorted(f for f, _ in files())
    for r in rows:
        assert r["task_id"] == r["file"]
        assert r["shard"] == shard_for_task(r["file"], 7, 2)
        assert r["category"] == r["file"].rsplit("/", 1)[0]
        assert r["size"] == 100 + int(r["file"][-11:-8])


def test_grouped_tasks_share_id_and_shard():
    table = build(files(5), per_task=2)
    rows = table.to_pylist()
    assert rows[0]["task_id"] == rows[1]["task_id"] == f"{rows[0]['file']}|{rows[1]['file']}"
    assert rows[0]["shard"] == rows[1]["shard"] == shard_for_task(rows[0]["task_id"], 7, 2)
    assert rows[4]["task_id"] == rows[4]["file"]


def test_save_load_roundtrip_and_summary(tmp_path):
    table = build(files(), total=50)
    summary = plan.summarize(table, 50)
    plan.save(tmp_path, table, summary)
    assert plan.load(tmp_path).equals(table)
    assert plan.load_summary(tmp_path) == summary
    assert summary.tasks == 20 and summary.files == 20
    assert summary.bytes == sum(s for _, s in files())
    used = len(set(table["shard"].to_pylist()))
    assert summary.shards_empty == 50 - used
    assert plan.empty_shards(table, 50, 2) == sorted(
        set(range(2, 52)) - set(table["shard"].to_pylist())
    )


def test_files_of_shard():
    table = build(files())
    shard = table["shard"][0].as_py()
    sub = plan.files_of_shard(table, shard)
    assert set(sub["shard"].to_pylist()) == {shard}
    assert isinstance(sub, pa.Table)


def test_missing_plan_says_to_run_snakemake(tmp_path):
    import pytest

    from shardwise.errors import InputError

    with pytest.raises(InputError, match="run `snakemake`"):
        plan.load(tmp_path)
    assert plan.load_summary(tmp_path) is None
