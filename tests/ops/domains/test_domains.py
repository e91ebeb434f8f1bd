"""``shardwise domains`` on synthetic run directories (summaries written directly)."""

import json
from pathlib import Path

import numpy as np
import pytest
from domainsynth import make_corpus, write_run
from inproc import plan_run

from shardwise.cli.main import main
from shardwise.ops.domains import compute as domains
from shardwise.ops.domains import render as domains_format
from shardwise.ops.domains.estimate import estimate
from shardwise.ops.report import page as report
from shardwise.planner.prepare import RunInfo
from shardwise.run import markers
from shardwise.runtime.dryrun import report_lines


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(seed=21, tasks=600, total_shards=60)


def run_cli(capsys, *args):
    code = main(["domains", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_cli_reports_what_the_estimator_computes_from_the_same_tasks(tmp_path, corpus, capsys):
    done = np.arange(0, corpus.total_shards, 2)
    run_dir = write_run(tmp_path, corpus, done)
    code, out, _ = run_cli(capsys, "--run-dir", run_dir, "--format", "json")
    doc = json.loads(out)
    est = estimate(corpus.population(), corpus.sample(corpus.labelled_after(done)))
    want = {
        (corpus.topics[c // 24], corpus.formats[c % 24]): (est.share[c], est.low[c], est.high[c])
        for c in np.flatnonzero(est.share > 0)
    }
    got = {
        (c["labels"]["topic"], c["labels"]["format"]): (c["share"], c["low"], c["high"])
        for c in doc["cells"]
    }
    assert code == 0
    assert (doc["view"], doc["weight"], doc["exact"]) == ("topic,format", "docs", False)
    assert doc["tasks_labelled"] == int(corpus.labelled_after(done).sum())
    assert got.keys() == want.keys()
    assert all(np.allclose(got[k], want[k], rtol=1e-9) for k in want)
    assert [c["share"] for c in doc["cells"]] == sorted((c["share"] for c in doc["cells"]),
                                                        reverse=True)  # fmt: skip


def test_when_every_shard_is_done_the_shares_are_the_exact_counts(tmp_path, corpus, capsys):
    run_dir = write_run(tmp_path, corpus, range(corpus.total_shards))
    code, out, _ = run_cli(capsys, "--run-dir", run_dir, "--classifier", "format",
                           "--weight", "bytes", "--format", "json")  # fmt: skip
    doc = json.loads(out)
    text = corpus.text_bytes.reshape(len(corpus.task_ids), 24, 24).sum(axis=1).sum(axis=0)
    exact = {corpus.formats[j]: text[j] / text.sum() for j in np.flatnonzero(text)}
    assert code == 0
    assert doc["exact"] is True
    assert {c["labels"]["format"]: c["share"] for c in doc["cells"]} == pytest.approx(exact)
    assert all(c["low"] == c["share"] == c["high"] for c in doc["cells"])
    assert doc["corpus_total"]["estimate"] == pytest.approx(text.sum())


def test_shards_finished_elsewhere_and_quarantined_files_are_reported(tmp_path, corpus, capsys):
    done, remote = np.arange(0, 30), np.arange(30, 40)
    quarantined = [corpus.task_ids[i] for i in np.flatnonzero(corpus.task_shard == 45)][:2]
    run_dir = write_run(tmp_path, corpus, done, remote_shards=remote, quarantine=quarantined)
    code, out, _ = run_cli(capsys, "--run-dir", run_dir, "--format", "json")
    doc = json.loads(out)
    remote_tasks = int(np.isin(corpus.task_shard, remote).sum())
    assert code == 0
    assert doc["tasks_total"] == len(corpus.task_ids) - len(quarantined)
    assert doc["tasks_labelled"] == int(np.isin(corpus.task_shard, done).sum())
    assert doc["quarantined_tasks"] == len(quarantined) == 2
    assert (
        f"{remote_tasks:,} task(s) in 10 finished shard(s) without a summary (finished "
        "elsewhere or before label counts existed) count as not labelled" in doc["notes"]
    )
    assert (
        "2 task(s) with quarantined files are left out of the corpus (quarantine.json)"
        in (doc["notes"])
    )


def test_table_csv_markdown_by_category_and_png(tmp_path, corpus, capsys):
    run_dir = write_run(tmp_path, corpus, range(0, corpus.total_shards, 3))
    code, out, _ = run_cli(capsys, "--run-dir", run_dir, "--classifier", "topic", "--top", "5")
    lines = out.splitlines()
    assert code == 0
    assert lines[0].startswith("topic: share of docs, estimated from ")
    assert lines[0].endswith(" points at most")
    header = next(i for i, line in enumerate(lines) if line.startswith("topic "))
    assert lines[header].split() == ["topic", "share", "95%", "CI", "est.", "docs"]
    assert lines[header + 6] == "... 19 more (--top N, or --format csv)"

    code, out, _ = run_cli(capsys, "--run-dir", run_dir, "--format", "csv", "--by", "category")
    rows = out.splitlines()
    assert rows[0] == "category,topic,format,share,low,high,total"
    assert {r.split(",")[0] for r in rows[1:]} == set(corpus.categories)

    code, out, _ = run_cli(capsys, "--run-dir", run_dir, "--format", "markdown", "--top", "2")
    assert "| topic | format | share | 95% CI | est. docs |" in out

    png = tmp_path / "pic" / "domains.png"
    code, _, err = run_cli(capsys, "--run-dir", run_dir, "--png", png, "--format", "json")
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert err == f"wrote {png}\n"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--classifier", "genre"], 1,
         "shardwise: --classifier genre: unknown classifier; the classifiers are format, topic"),
        (["--pair", "topic,genre"], 1,
         "shardwise: --pair topic,genre: unknown classifier(s) genre; the classifiers are "
         "format, topic"),
        (["--pair", "format,topic"], 1,
         "shardwise: --pair format,topic: this pair's joint counts were not kept (config "
         "domains.pairs); pairs available: topic,format"),
    ],
)  # fmt: skip
def test_unknown_views_are_refused_naming_what_exists(tmp_path, corpus, capsys, args, code,
                                                     message):  # fmt: skip
    run_dir = write_run(tmp_path, corpus, [0, 1])
    got, _, err = run_cli(capsys, "--run-dir", run_dir, *args)
    assert (got, err.strip()) == (code, message)


def test_nothing_done_and_never_planned_are_clear_errors(tmp_path, corpus, capsys):
    run_dir = write_run(tmp_path, corpus, [])
    code, _, err = run_cli(capsys, "--run-dir", run_dir)
    assert (code, err.strip()) == (
        1,
        f"shardwise: no shard of {run_dir} is done yet (0 of 60); "
        "run this again when shards finish",
    )
    run_dir = write_run(tmp_path, corpus, [], remote_shards=[0, 1])
    code, _, err = run_cli(capsys, "--run-dir", run_dir)
    assert (code, err.strip()) == (
        1,
        f"shardwise: none of the 2 finished shard(s) with files of {run_dir} has a readable "
        f"summary ({run_dir / 'summaries'}/<shard>.arrow): a shard marked done because its "
        "files were labelled elsewhere (another cluster, `source: remote`) or by a version "
        "without label counts has none; shards this run finishes will have one",
    )
    code, _, err = run_cli(capsys, "--run-dir", tmp_path / "elsewhere")
    assert code == 2
    assert err.startswith(f"shardwise domains: {tmp_path / 'elsewhere'} does not exist: ")
    assert "Run `snakemake -n` (or `shardwise plan --configfile <config>`) first" in err


def test_the_dry_run_printout_gains_one_line_with_the_largest_labels(tmp_path, corpus):
    run_dir = write_run(tmp_path, corpus, range(corpus.total_shards))
    (tmp_path / "labels").mkdir()
    report = report_lines(RunInfo(run_dir=run_dir, shards=(), output_uri=""))
    lines = [line for line in report if line.startswith("domains")]
    topic = corpus.true_shares(classifier="topic")
    first = corpus.topics[int(np.argmax(topic))]
    assert len(lines) == 1
    assert lines[0].startswith(f"domains  topic: {first} {100 * topic.max():.1f}%, ")
    assert lines[0].endswith("(exact; shardwise domains)")
    assert domains_format.headline(tmp_path / "nowhere") is None


def test_the_html_report_includes_the_domain_picture(tmp_path, corpus):
    from shardwise.ops.coverage import compute as coverage

    run_dir = write_run(tmp_path, corpus, range(10))
    state = coverage.load_state(run_dir, read_stats=lambda: ())
    cov = coverage.compute(state)
    out = tmp_path / "r" / "report.html"
    report.write_report(state, cov, out, domains_png=tmp_path / "r" / "d.png")
    page = out.read_text()
    assert "<h2>Domain distribution</h2>" in page
    assert f"topic{domains.TIMES}format: share of docs, estimated from" in page
    assert (tmp_path / "r" / "d.png").read_bytes()[:4] == b"\x89PNG"


def test_only_empty_shards_done_says_nothing_is_labelled_yet(tmp_path, capsys):
    cfg = plan_run(tmp_path, total_shards=64)  # more shards than files: some are empty
    run_dir = Path(cfg["run_dir"])
    assert markers.done_shards(run_dir)  # marked done at planning
    code, _, err = run_cli(capsys, "--run-dir", run_dir)
    assert code == 1
    assert err.startswith(f"shardwise: no file of {run_dir} is labelled yet: the ")
    assert "marked done have no files (empty shards are marked done at planning)" in err


def test_part_way_an_unbounded_interval_says_why_instead_of_a_question_mark(tmp_path):
    corpus = make_corpus(seed=21, tasks=600, total_shards=60, categories=40)
    run_dir = write_run(tmp_path, corpus, [0])  # one shard: most categories not reached yet
    d = domains.compute(domains.load(run_dir))
    assert d.est.uncovered, "precondition: a category with no labelled task"
    [line] = [ln for ln in domains_format.summary_lines(d) if ln.startswith("corpus")]
    n = len(d.est.uncovered)
    assert "(95% CI at least " in line
    assert f"no upper bound while {n} categor" in line and "no labelled task)" in line
    assert "?" not in domains_format.format_table(d)


def test_weborganizer_format_is_domain_statistics_exact_when_done(tmp_path, corpus, capsys):
    """The list WebOrganizer's domain_statistics.py writes and select_training_data.py reads."""
    run_dir = write_run(tmp_path, corpus, range(corpus.total_shards))
    code, out, _ = run_cli(capsys, "--run-dir", run_dir, "--format", "weborganizer")
    assert code == 0
    got = json.loads(out)
    docs = corpus.docs.sum(axis=0)  # (topic x format) documents, exact
    ids = domains.weborganizer_ids()
    want = {
        (ids["topic"][corpus.topics[c // 24]], ids["format"][corpus.formats[c % 24]]): int(n)
        for c, n in enumerate(docs) if n
    }  # fmt: skip
    assert {tuple(e["domain"]): e["documents"] for e in got} == want
    assert sum(e["weight"] for e in got) == pytest.approx(1.0)
    assert all(e["weight"] == pytest.approx(e["documents"] / docs.sum()) for e in got)
    assert all("weight_low" not in e and e["tokens"] is None for e in got)
    assert [e["domain"] for e in got] == sorted(e["domain"] for e in got)
    code, out, _ = run_cli(capsys, "--run-dir", run_dir, "--classifier", "topic", "--format",
                           "weborganizer")  # fmt: skip
    assert all(isinstance(e["domain"], int) for e in json.loads(out))


def test_weborganizer_format_part_way_carries_the_interval(tmp_path, corpus, capsys):
    run_dir = write_run(tmp_path, corpus, np.arange(0, corpus.total_shards, 3))
    code, out, _ = run_cli(capsys, "--run-dir", run_dir, "--format", "weborganizer")
    got = json.loads(out)
    assert code == 0 and got
    assert all(e["estimated"] and e["weight_low"] <= e["weight"] <= e["weight_high"] for e in got)
