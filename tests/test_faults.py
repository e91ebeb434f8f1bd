"""The fault matrix (issue 7): inject each fault, recover, then prove nothing was lost.

Every row ends the same way: ``verify --complete`` finds no problem, and every input
row has exactly one sidecar row with the input's id in order (``e2e``'s
``assert_labelled_exactly_once``, against the input re-read from disk). Rows 4 (S3
server stopped mid-upload) and 13 (a job lost by the scheduler) live with the S3 and
SLURM tests; they are listed here as skips that name the test that covers them.

Cost control (2 CPU cores): tiny demo corpora, ``max_length`` 256, one engine loaded
in-process for the rows whose fault is in the data (the same ``run_shard`` the
classify rule calls), real ``shardwise classify-shard`` processes for the signal
rows, and real Snakemake only where Snakemake is part of the fault. One finished
Snakemake run (``finished`` below) serves rows 10, 11, 12 and the secret and quoting
checks.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from e2e import (
    Gate,
    assert_labelled_exactly_once,
    input_files,
    make_run,
    minimal_config,
    run_snakemake,
    snakemake_cmd,
    wait_until,
)

from shardwise import config as configmod
from shardwise.classify.shard_job import load_engine, run_shard
from shardwise.cli.main import main
from shardwise.demo.corpus import DemoSize
from shardwise.errors import ConfigError, InputError, ShardwiseError, StorageError
from shardwise.ops.coverage import compute as coverage
from shardwise.ops.verify import check as verify
from shardwise.planner.prepare import prepare_run
from shardwise.run import claims, markers, plan
from shardwise.run.failures import FAILURES_DIR
from shardwise.run.fields import FieldPaths
from shardwise.run.reader import read_documents
from shardwise.store.location import Location

ALL = ("topic", "topic_nourl", "format", "format_nourl")
BIN = Path(sys.executable).parent
#: A corpus big enough that a worker can be caught between its first and last file.
KILLABLE = DemoSize(files_per_category=3, docs_per_file=16, median_words=60, max_words=600)
TINY = DemoSize(files_per_category=1, docs_per_file=6, median_words=20, max_words=80)


# -- helpers --------------------------------------------------------------------


def env(**extra: str) -> dict[str, str]:
    """The environment of a worker or Snakemake: the venv's ``shardwise`` on PATH."""
    return dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", **extra)


def plan_only(config: Path) -> Path:
    """Plan a run in-process (what the Snakefile does at parse time); its run dir.

    ``dryrun=True`` skips the run-dir lock: a lock taken here would be held by the
    pytest process for the whole session.
    """
    info = prepare_run(configmod.load_yaml(config), main_process=True, dryrun=True)
    return info.run_dir


def classify_cmd(run_dir: Path, shard: int) -> list[str]:
    """The classify rule's command line."""
    return [
        str(BIN / "shardwise"),
        "classify-shard",
        "--run-dir",
        str(run_dir),
        "--shard",
        str(shard),
        "--no-progress",
    ]


def assert_verified(run_dir: Path, *, allow_temp: bool = False) -> verify.VerifyReport:
    """``shardwise verify --complete`` passes, with no warning (temp files if allowed)."""
    report = verify.verify_run(run_dir, complete=True)
    assert report.ok, "\n".join(report.lines())
    unexpected = [w for w in report.warnings if not (allow_temp and "temp file" in w.what)]
    assert not unexpected, "\n".join(report.lines())
    assert main(["verify", "--run-dir", str(run_dir), "--complete"]) == 0
    return report


def outputs_state(labels: Path) -> dict[Path, int]:
    """mtime of every marker and sidecar: a file labelled twice changes its mtime."""
    return {
        p: p.stat().st_mtime_ns
        for p in labels.rglob("*")
        if p.name.endswith((".done", ".labels.parquet"))
    }


def assert_untouched(before: dict[Path, int]) -> None:
    for path, mtime in before.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was written again"


def snapshot(*roots: Path) -> dict[str, str]:
    """Content hash of every file under ``roots`` (the run-dir lock file excepted)."""
    out = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file() and p.name != ".shardwise.lock":
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def failure_records(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / FAILURES_DIR).rglob("*.json"))]


def jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def parquet(table: pa.Table) -> bytes:
    import io

    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def engine_factory() -> Callable:
    """One real engine for the in-process rows (torch loads once per module)."""
    cache: dict = {}

    def factory(ctx):
        key = (ctx.meta.classifiers, ctx.settings.inference)
        if key not in cache:
            cache[key] = load_engine(ctx)
        return cache[key]

    return factory


def label_in_process(run_dir: Path, engine_factory: Callable) -> None:
    for shard in sorted(plan.nonempty_shards(plan.load(run_dir))):
        run_shard(run_dir, shard, engine_factory=engine_factory, progress=False)


# -- 1, 2: the worker killed or stopped mid-file ----------------------------------


@pytest.mark.slow
@pytest.mark.race
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_1_2_worker_killed_mid_file_then_rerun_skips_finished_files(tmp_path, demo_models, sig):
    config = make_run(tmp_path, demo_models, total_shards=1, size=KILLABLE)
    run_dir = plan_only(config)
    labels = tmp_path / "labels"
    total = len(input_files(tmp_path / "corpus"))
    log = tmp_path / "worker.log"
    gate = Gate(tmp_path / "gate", after_files=1)  # the job stops after its first file
    with log.open("w") as err:
        proc = subprocess.Popen(
            classify_cmd(run_dir, 0), stdout=subprocess.DEVNULL, stderr=err, env=env(**gate.env())
        )
        gate.wait(1, alive=lambda: proc.poll() is None)
        sent = time.time()
        proc.send_signal(sig)
        rc = proc.wait(timeout=120)
    stopped_in = time.time() - sent
    before = outputs_state(labels)
    done = [p for p in before if p.name.endswith(".done")]
    assert len(done) == 1 < total, f"the signal did not land mid-shard ({len(done)}/{total})"
    assert not markers.done_shards(run_dir)
    if sig == signal.SIGKILL:
        assert rc == -signal.SIGKILL
    else:
        assert rc == 143, log.read_text()[-2000:]
        assert "received SIGTERM" in log.read_text()
        assert stopped_in < 30  # the current batch is finished or abandoned, not the shard
        (record,) = failure_records(run_dir)
        assert record["interrupted"] is True and record["shard"] == 0
    # What was left is consistent: every marker vouches for a whole sidecar and stats;
    # a partial sidecar (no marker) is only a warning in a shard that is not done.
    partial = verify.verify_run(run_dir)
    assert partial.ok, "\n".join(partial.lines())
    if sig == signal.SIGTERM:
        assert not [w for w in partial.warnings if "temp file" in w.what]

    rerun = subprocess.run(
        classify_cmd(run_dir, 0), capture_output=True, text=True, env=env(), check=False
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"{len(done)} already done" in rerun.stderr
    finished_files = {str(p).removesuffix(".done") for p in done}
    assert_untouched(
        {
            p: m
            for p, m in before.items()
            if str(p).removesuffix(".labels.parquet") in finished_files
        }
    )
    assert_untouched({p: m for p, m in before.items() if p in done})
    assert markers.done_shards(run_dir) == {0}
    assert_verified(run_dir, allow_temp=sig == signal.SIGKILL)
    rows = assert_labelled_exactly_once(tmp_path / "corpus", labels, ALL)
    assert rows == total * KILLABLE.docs_per_file


# -- 3: the Snakemake process itself killed ---------------------------------------


@pytest.mark.slow
@pytest.mark.race
def test_3_snakemake_killed_then_rerun_incomplete(tmp_path, demo_models):
    config = make_run(tmp_path, demo_models, total_shards=3)
    labels = tmp_path / "labels"
    gate = Gate(tmp_path / "gate", after_files=1)  # the running job stops after one file
    proc = subprocess.Popen(
        snakemake_cmd(config, "--cores", "1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env(**gate.env()),
    )
    again = None
    log = tmp_path / "again.log"
    try:
        gate.wait(1, alive=lambda: proc.poll() is None)
        # Only Snakemake dies (as under the OOM killer); its running job is orphaned. The
        # same command run again adopts it (no --unlock: the dead process's lock is
        # cleared), labels the other shards, and waits for the orphan to finish its own.
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        before = {p: m for p, m in outputs_state(labels).items() if p.name.endswith(".done")}
        assert before and len(markers.done_shards(tmp_path / "run")) < 3
        with log.open("w") as out:
            again = subprocess.Popen(
                snakemake_cmd(config, "--rerun-incomplete"),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env(),
            )
        adopted = "in flight 1 shard(s) held by 1 live job(s) of an earlier invocation: adopted"
        wait_until(lambda: adopted in log.read_text() or again.poll() is not None, "adoption")
        assert adopted in log.read_text(), log.read_text()[-4000:]
        gate.open()
        assert again.wait(timeout=600) == 0, log.read_text()[-4000:]
        assert "cannot be locked" not in log.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # any orphan of the killed run
        if again is not None and again.poll() is None:
            again.kill()
    assert not claims.read_claims(tmp_path / "run")
    assert_untouched(before)
    assert markers.done_shards(tmp_path / "run") == {0, 1, 2}
    assert_verified(tmp_path / "run")
    assert_labelled_exactly_once(tmp_path / "corpus", labels, ALL)


# -- 4: storage stopped mid-upload (covered by the S3 workflow tests) --------------


# Row 4 lives in tests/test_storage_s3_workflow.py::
# test_server_stopped_mid_run_then_rerun_labels_each_row_once (it needs the S3 server).


# -- 5, 6: an unreadable file fails its shard after the others; repaired, rerun ------


@pytest.mark.slow
def test_5_6_corrupt_parquet_and_truncated_jsonl_then_repaired(tmp_path, demo_models):
    config = make_run(tmp_path, demo_models, total_shards=2)
    corpus, labels, run_dir = tmp_path / "corpus", tmp_path / "labels", tmp_path / "run"
    files = input_files(corpus)
    bad = {
        next(f for f in files if f.endswith(".parquet")): "cannot read parquet file",
        next(f for f in files if f.endswith(".jsonl.gz")): "Compressed file ended",
        next(f for f in files if f.endswith(".jsonl.zst")): "zstd stream ended in the middle",
    }
    backup = tmp_path / "backup"
    for rel in bad:
        (backup / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(corpus / rel, backup / rel)
    (corpus / next(iter(bad))).write_bytes(b"PAR1" + b"\0garbage" * 64 + b"PAR1")
    for rel in list(bad)[1:]:
        data = (backup / rel).read_bytes()
        (corpus / rel).write_bytes(data[: len(data) // 2])

    proc = run_snakemake(config, "--keep-going", check=False)
    assert proc.returncode != 0
    for rel in files:
        assert (labels / f"{rel}.done").exists() == (rel not in bad), rel
    for rel in bad:
        assert not (labels / f"{rel}.labels.parquet").exists(), rel
    failed = {f["file"]: f["error"] for r in failure_records(run_dir) for f in r["failed"]}
    assert set(failed) == set(bad)
    for rel, problem in bad.items():
        assert rel in failed[rel] and problem in failed[rel], failed[rel]
    logs = "".join(p.read_text() for p in (run_dir / "logs").rglob("*.log"))
    for rel in bad:
        assert rel in logs
    # The partial run is consistent: the failed shards are simply not done.
    assert verify.verify_run(run_dir).ok

    before = outputs_state(labels)
    for rel in bad:  # repair: the file is rewritten valid
        shutil.copy2(backup / rel, corpus / rel)
    run_snakemake(config)
    assert_untouched(before)
    assert_verified(run_dir)
    rows = assert_labelled_exactly_once(corpus, labels, ALL)
    assert rows == len(files) * 12


# -- 7, 8, 9: recoverable bad input is labelled, counted and logged ----------------


ODD_FILES: dict[str, bytes] = {
    # 7: empty files, null / empty / missing / non-string text, null ids and urls
    "odd/empty/part-0000.jsonl": b"",
    "odd/empty/part-0001.jsonl.gz": gzip.compress(b"", mtime=0),
    "odd/empty/part-0002.parquet": parquet(
        pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())})
    ),
    "odd/nulls/part-0000.jsonl": jsonl(
        [
            {"id": "n1", "text": None, "url": None},
            {"id": "n2", "text": "", "url": "https://n/2"},
            {"id": "n3"},
            {"id": "n4", "text": 12345, "url": "https://n/4"},
            {"id": None, "text": "no id here", "url": "https://n/5"},
            {"id": "n6", "text": "   \n\t ", "url": "https://n/6"},
        ]
    ),
    "odd/nulls/part-0001.parquet": parquet(
        pa.table({"id": ["p1", "p2", "p3"], "text": [None, "", "some words"], "url": ["u"] * 3})
    ),
    # 8: duplicate ids within a file
    "odd/dupes/part-0000.jsonl": jsonl(
        [{"id": i, "text": f"doc {n}", "url": f"https://d/{n}"} for n, i in enumerate("abaac")]
    ),
    "odd/dupes/part-0001.parquet": parquet(
        pa.table({"id": ["x", "x", "y"], "text": ["one", "two", "three"], "url": ["u"] * 3})
    ),
    # 9: bytes that are not UTF-8, a lone surrogate escape, a document far over max_length
    "odd/bytes/part-0000.jsonl": b'{"id": "b1", "text": "caf\xe9 \xff\xfe ok", "url": "u"}\n'
    b'{"id": "b2", "text": "fine", "url": "u"}\n'
    b'{"id": "b3\\udc80", "text": "lone \\ud800 surrogate", "url": "https://x/\\udfff"}\n',
    "odd/bytes/part-0001.parquet": parquet(
        pa.table(
            {
                "id": ["q1", "q2"],
                "text": pa.array([b"valid", b"in\xc3\x28valid"], pa.binary()),
                "url": ["u", "u"],
            }
        )
    ),
    "odd/long/part-0000.jsonl": jsonl(
        [
            {"id": "long", "text": "word " * 200_000, "url": "https://long.example/" + "p" * 5000},
            {"id": "short", "text": "a short one", "url": "https://short.example/"},
        ]
    ),
}

#: What each odd file's stats must count (the reader's documented policy).
EXPECTED_COUNTS: dict[str, dict[str, int]] = {
    "odd/nulls/part-0000.jsonl": {
        "null_texts": 1,
        "missing_text": 1,
        "non_string_texts": 1,
        "null_ids": 1,
        "null_urls": 1,
        "missing_url": 1,
        "empty_texts": 2,  # "" and whitespace only
    },
    "odd/nulls/part-0001.parquet": {"null_texts": 1, "empty_texts": 1},
    "odd/dupes/part-0000.jsonl": {"duplicate_ids": 2},
    "odd/dupes/part-0001.parquet": {"duplicate_ids": 1},
    "odd/bytes/part-0000.jsonl": {"invalid_utf8_lines": 2},
    "odd/bytes/part-0001.parquet": {"invalid_utf8_values": 1},
}


@pytest.mark.slow
def test_7_8_9_odd_input_is_labelled_counted_and_named(
    tmp_path, demo_models, engine_factory, caplog
):
    config = make_run(tmp_path, demo_models, total_shards=2, size=TINY)
    corpus, labels = tmp_path / "corpus", tmp_path / "labels"
    for rel, data in ODD_FILES.items():
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).write_bytes(data)
    run_dir = plan_only(config)
    started = time.time()
    with caplog.at_level(logging.WARNING, logger="shardwise.classify.shard_job"):
        label_in_process(run_dir, engine_factory)
    assert time.time() - started < 300
    assert_verified(run_dir)
    assert_labelled_exactly_once(corpus, labels, ALL)
    for rel in ODD_FILES:
        stats = json.loads((labels / f"{rel}.stats.json").read_text())
        counts = {k: v for k, v in stats["counts"].items() if v}
        expected = EXPECTED_COUNTS.get(rel, {})
        assert counts == expected, rel
        if expected:  # the job log names the file and the problem
            lines = [r.getMessage() for r in caplog.records if rel in r.getMessage()]
            assert lines, rel
            for key, value in expected.items():
                assert f"{key}={value}" in lines[0], lines[0]
    empty = [r for r in ODD_FILES if r.startswith("odd/empty/")]
    for rel in empty:
        assert pq.read_table(labels / f"{rel}.labels.parquet").num_rows == 0
    # Replacement, not loss: the bad bytes became U+FFFD and the ids are kept in order.
    docs = read_documents(Location(str(corpus)), "odd/bytes/part-0000.jsonl", FieldPaths())
    assert docs.ids == ["b1", "b2", "b3\ufffd"] and "\ufffd" in docs.texts[0]
    table = pq.read_table(labels / "odd/bytes/part-0000.jsonl.labels.parquet")
    assert table["id"].to_pylist() == ["b1", "b2", "b3\ufffd"]
    # The long document is truncated at max_length (256 tokens), not split or dropped.
    stats = json.loads((labels / "odd/long/part-0000.jsonl.stats.json").read_text())
    assert stats["docs"] == 2
    assert stats["truncated_docs"] == 1  # counted, and totalled by coverage
    cov = coverage.compute(coverage.load_state(run_dir))
    assert cov.data_quality["truncated_docs"] == 1
    assert stats["tokens"] <= 2 * 256 * len(ALL)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "recorded"),
    [
        (
            RuntimeError("CUDA error: an illegal memory access was encountered"),
            "cpu (cpu) on host {host}: RuntimeError: CUDA error: an illegal memory access",
        ),
        (ValueError("an unexpected bug"), "ValueError: an unexpected bug"),
    ],
    ids=["device-error", "other-exception"],
)
def test_device_failure_mid_shard_is_recorded_then_rerun_completes(
    tmp_path, demo_models, engine_factory, fault, recorded
):
    """A CUDA error (or any exception) on the 3rd batch: the failure record names the file
    being labelled, the host and the device; finished files stay done; a rerun completes."""
    config = make_run(tmp_path, demo_models, total_shards=1, size=TINY)
    run_dir = plan_only(config)
    forwards = []

    def failing_factory(ctx):
        engine = load_engine(ctx)

        def hook(rows: int, padded: int) -> None:
            forwards.append(rows)
            if len(forwards) == 3:
                raise fault

        engine._forward_hook = hook
        return engine

    with pytest.raises(type(fault) if isinstance(fault, ValueError) else ShardwiseError):
        run_shard(run_dir, 0, engine_factory=failing_factory, progress=False)
    (record,) = failure_records(run_dir)
    host = os.uname().nodename
    assert record["hostname"] == host
    (entry,) = record["failed"]
    assert entry["file"] in input_files(tmp_path / "corpus")
    assert entry["error"].startswith(recorded.format(host=host))
    assert not markers.done_shards(run_dir)
    run_shard(run_dir, 0, engine_factory=engine_factory, progress=False)
    assert_verified(run_dir)
    assert_labelled_exactly_once(tmp_path / "corpus", tmp_path / "labels", ALL)


def test_truncated_zstd_is_an_error_not_fewer_rows(tmp_path):
    """The bug row 6 found: a cut .jsonl.zst used to read as a clean, shorter file."""
    import zstandard

    data = jsonl([{"id": str(i), "text": "x " * 200} for i in range(300)])
    frames = zstandard.ZstdCompressor().compress(data[:9000])
    frames += zstandard.ZstdCompressor().compress(data[9000:])
    loc = Location(str(tmp_path))
    (tmp_path / "ok.jsonl.zst").write_bytes(frames)
    assert len(read_documents(loc, "ok.jsonl.zst", FieldPaths(url=None))) == 300
    for cut in (len(frames) // 4, len(frames) - 2):
        (tmp_path / "cut.jsonl.zst").write_bytes(frames[:cut])
        with pytest.raises(InputError, match=r"cut\.jsonl\.zst: .*truncated file"):
            read_documents(loc, "cut.jsonl.zst", FieldPaths(url=None))


@pytest.mark.parametrize("text_type", [pa.binary(), pa.string()])
def test_parquet_invalid_utf8_is_replaced_and_counted(tmp_path, text_type):
    """The bug row 9 found: one bad byte in a Parquet text column failed the whole file."""
    raw = pa.array([b"good", b"bad \xff byte", None], pa.binary())
    column = raw if text_type == pa.binary() else raw.view(pa.string())
    pq.write_table(pa.table({"id": ["a", "b", "c"], "text": column}), tmp_path / "f.parquet")
    docs = read_documents(Location(str(tmp_path)), "f.parquet", FieldPaths(url=None))
    assert docs.texts == ["good", "bad \ufffd byte", ""]
    assert docs.counts["invalid_utf8_values"] == 1 and docs.counts["null_texts"] == 1


# -- 10, 11, 12 and the security checks share one finished Snakemake run ------------


ODD_DIR = "odd dir; $(touch PWNED) `touch PWNED2` 'q' \"dq\""


@pytest.fixture(scope="module")
def finished(tmp_path_factory, demo_models) -> SimpleNamespace:
    """One real run, done three ways at once (each checked by its own test below).

    * row 12: while run A works, B1 (same working directory) and B2 (another working
      directory, same run dir) start and must refuse;
    * quoting: every path has spaces, quotes and shell syntax in it;
    * secrets: fake AWS credentials are in the environment of every process.
    """
    base = tmp_path_factory.mktemp("finished") / ODD_DIR
    base.mkdir()
    config = make_run(base, demo_models, total_shards=2)
    secrets = {
        "AWS_ACCESS_KEY_ID": "SWFAULTKEY" + "7" * 10,
        "AWS_SECRET_ACCESS_KEY": "sw-fault-secret-" + "s3cr3t" * 4,
        "AWS_SESSION_TOKEN": "sw-fault-token-" + "t0k3n" * 4,
    }
    run_env = env(**secrets)
    gate = Gate(base / "gate")
    a = subprocess.Popen(
        snakemake_cmd(config, "--cores", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**run_env, **gate.env()},
    )
    # B starts once A's first shard job stands at the gate: A holds the run-dir lock and
    # cannot finish before B has been refused, however slowly either starts.
    gate.wait(1, alive=lambda: a.poll() is None)
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    other = snakemake_cmd(config, "--cores", "1")
    other[other.index("--directory") + 1] = str(elsewhere)
    b_cmds = {"same_directory": snakemake_cmd(config, "--cores", "1"), "other_directory": other}
    b_procs = {
        name: subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run_env
        )
        for name, cmd in b_cmds.items()
    }
    second = {name: (p.communicate(timeout=300)[0], p.returncode) for name, p in b_procs.items()}
    a_running_during_b = a.poll() is None
    gate.open()
    a_out = a.communicate(timeout=600)[0]
    assert a.returncode == 0, a_out[-4000:]
    return SimpleNamespace(
        base=base,
        config=config,
        run_dir=base / "run",
        labels=base / "labels",
        corpus=base / "corpus",
        secrets=secrets,
        outputs=[a_out, *(out for out, _rc in second.values())],
        second=second,
        a_running_during_b=a_running_during_b,
    )


@pytest.mark.slow
@pytest.mark.race
def test_12_second_snakemake_on_the_same_run_dir_refuses(finished):
    assert finished.a_running_during_b, "run A ended before B was refused"
    for name, (out, rc) in finished.second.items():
        assert rc != 0, f"{name}: {out[-2000:]}"
        # Our lock (taken at parse time) refuses before Snakemake's own lock is tried;
        # with another working directory, Snakemake's lock could not have helped.
        assert "is in use by pid" in out and "would race" in out, f"{name}: {out[-2000:]}"
    assert_verified(finished.run_dir)
    rows = assert_labelled_exactly_once(finished.corpus, finished.labels, ALL)
    assert rows == len(input_files(finished.corpus)) * 12


@pytest.mark.slow
def test_10_total_shards_changed_is_refused_before_any_job(finished, tmp_path):
    cfg = yaml.safe_load(finished.config.read_text())
    cfg["sharding"]["total_shards"] = 5
    changed = tmp_path / "config.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    before = snapshot(finished.run_dir, finished.labels)
    proc = run_snakemake(changed, check=False)
    assert proc.returncode != 0
    assert "total_shards: 2 -> 5" in proc.stdout, proc.stdout[-3000:]
    assert "rule classify" not in proc.stdout  # no job was started
    assert snapshot(finished.run_dir, finished.labels) == before
    assert_verified(finished.run_dir)


@pytest.mark.slow
def test_11_input_set_changed_is_refused_with_counts(finished):
    corpus = finished.corpus
    removed = corpus / input_files(corpus)[0]
    kept = removed.read_bytes()
    stat = removed.stat()  # put back as it was, modification time too (else: changed in place)
    added = corpus / "cc" / "science" / "part-9999.jsonl"
    before = snapshot(finished.run_dir, finished.labels)
    removed.unlink()
    added.write_bytes(jsonl([{"id": "new", "text": "a new document"}]))
    try:
        proc = run_snakemake(finished.config, check=False)
    finally:
        added.unlink()
        removed.write_bytes(kept)
        os.utime(removed, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert proc.returncode != 0
    assert "input set changed: 1 task(s) added, 1 removed" in proc.stdout, proc.stdout[-3000:]
    assert "`shardwise plan --extend --gone keep|remove --configfile" in proc.stdout
    after = snapshot(finished.run_dir, finished.labels)
    drift_json = str(finished.run_dir / "drift.json")  # what it found, for coverage
    assert {k: v for k, v in after.items() if k != drift_json} == before  # nothing else
    assert_verified(finished.run_dir)


# -- 13: a job lost by the scheduler (covered by the SLURM tests) -------------------


# Row 13 lives in tests/slurm/test_slurm_workflow.py::
# test_scancelled_job_is_retried_and_run_completes (it needs the SLURM cluster).


# -- 14: disk full while writing -------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs (we run as root in CI); skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
@pytest.mark.parametrize("when", ["first-sidecar", "mid-run"])
def test_14_disk_full_fails_cleanly_then_rerun_completes(
    tmp_path, demo_models, engine_factory, small_disk, when
):
    config = make_run(tmp_path, demo_models, total_shards=1)
    cfg = yaml.safe_load(config.read_text())
    cfg["output"]["uri"] = str(small_disk / "labels")
    config.write_text(yaml.safe_dump(cfg))
    run_dir = plan_only(config)
    labels = small_disk / "labels"
    filler = small_disk / "filler"
    if when == "first-sidecar":  # no byte left: the very first write, a sidecar, fails
        st = os.statvfs(small_disk)
        filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize))
    with pytest.raises(StorageError, match="No space left on device") as err:
        run_shard(run_dir, 0, engine_factory=engine_factory, progress=False)
    assert f"cannot write {labels}/" in str(err.value)  # names the file
    done = list(labels.rglob("*.done"))
    if when == "first-sidecar":
        assert ".labels.parquet: OSError" in str(err.value)
        assert not done
    else:  # some files were finished before the disk filled up
        assert 0 < len(done) < len(input_files(tmp_path / "corpus")), "filled too early"
    assert not markers.done_shards(run_dir)
    assert not [p for p in labels.rglob(".*") if ".tmp-" in p.name]  # no temp files left
    partial = verify.verify_run(run_dir)
    assert partial.ok, "\n".join(partial.lines())
    before = outputs_state(labels)
    filler.unlink(missing_ok=True)
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)
    run_shard(run_dir, 0, engine_factory=engine_factory, progress=False)
    assert_untouched({p: m for p, m in before.items() if p.name.endswith(".done")})
    assert_verified(run_dir)
    assert_labelled_exactly_once(tmp_path / "corpus", labels, ALL)


# -- security -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "evil",
    [
        "../escape.jsonl",
        "cc/../../escape.jsonl",
        "/etc/escape.jsonl",
        "s3://other-bucket/escape.jsonl",
        "cc/./escape.jsonl",
        "cc\\..\\escape.jsonl",
        "cc/new\nline.jsonl",
    ],
)
def test_paths_that_could_escape_the_output_are_refused_at_plan_time(tmp_path, monkeypatch, evil):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "ok.jsonl").write_bytes(jsonl([{"id": "1", "text": "t"}]))
    listing = [("ok.jsonl", 10, "1"), (evil, 10, "1")]
    monkeypatch.setattr(Location, "list_entries", lambda self: sorted(listing))
    cfg = minimal_config(tmp_path, corpus)
    with pytest.raises(InputError, match="cannot be used safely in an output path") as err:
        prepare_run(cfg, main_process=True, dryrun=True)
    assert repr(evil) in str(err.value)
    assert "input.skip_unsafe_names: true" in str(err.value)
    assert not (tmp_path / "labels").exists()
    assert not list((tmp_path / "run").rglob("*"))  # no run.json, no plan


def test_a_real_file_with_a_control_character_in_its_name_is_refused(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "bad\x1bname.jsonl").write_bytes(jsonl([{"id": "1", "text": "t"}]))
    cfg = minimal_config(tmp_path, corpus)
    with pytest.raises(InputError, match=r"'bad\\x1bname.jsonl': it holds control characters"):
        prepare_run(cfg, main_process=True, dryrun=True)


def test_yaml_is_loaded_safely(tmp_path):
    pwned = tmp_path / "PWNED"
    path = tmp_path / "config.yaml"
    path.write_text(f'run_dir: !!python/object/apply:os.system ["touch {pwned}"]\n')
    with pytest.raises(ConfigError, match="not valid YAML"):
        configmod.load_yaml(path)
    assert not pwned.exists()


@pytest.mark.slow
def test_snakemake_loads_the_config_safely_too(tmp_path):
    pwned = tmp_path / "PWNED"
    path = tmp_path / "config.yaml"
    path.write_text(f'run_dir: !!python/object/apply:os.system ["touch {pwned}"]\n')
    proc = run_snakemake(path, "--dry-run", check=False, timeout=300)
    assert proc.returncode != 0
    assert not pwned.exists()


@pytest.mark.parametrize(
    "path",
    [("surprise",), ("input", "surprise"), ("inference", "surprise"), ("storage", "surprise")],
)
def test_config_schema_rejects_unknown_keys(tmp_path, path):
    cfg = minimal_config(tmp_path, inference={}, storage={})
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = 1
    with pytest.raises(ConfigError, match="surprise"):
        configmod.validate(cfg)


def test_braces_in_the_run_dir_are_refused_before_planning(tmp_path):
    """Found by the quoting check: Snakemake reads braces in the run dir as wildcards."""
    cfg = minimal_config(tmp_path, run_dir=str(tmp_path / "{shard}"))
    with pytest.raises(ConfigError, match="without braces"):
        prepare_run(cfg, main_process=True, dryrun=True)
    assert not (tmp_path / "{shard}").exists()


@pytest.mark.slow
def test_odd_characters_in_paths_reach_the_shell_quoted(finished):
    assert "$(" in str(finished.run_dir) and "'" in str(finished.run_dir)
    assert not list(finished.base.parent.rglob("PWNED*"))
    assert not list(Path.cwd().glob("PWNED*"))
    assert markers.done_shards(finished.run_dir) == {0, 1}
    assert list((finished.run_dir / "logs" / "classify").glob("*.log"))


@pytest.mark.slow
def test_no_secret_is_written_anywhere(finished):
    values = [v.encode() for v in finished.secrets.values()]
    scanned = 0
    for p in finished.base.rglob("*"):  # outputs, logs, run dir, .snakemake metadata
        if not p.is_file():
            continue
        data = p.read_bytes()
        scanned += 1
        for value in values:
            assert value not in data, f"{p} holds a secret"
            assert value.decode() not in str(p), f"{p} names a secret"
    assert scanned > 50
    assert list((finished.base / ".snakemake").rglob("*"))  # Snakemake's metadata was scanned
    for out in finished.outputs:
        for value in values:
            assert value.decode() not in out
