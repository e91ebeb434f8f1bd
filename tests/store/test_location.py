"""``shardwise.storage`` against every backend: a local folder and a real S3 server.

One suite, parametrised over backends the way fsspec's ``tests/abstract`` does: a
behaviour that holds on local disk must hold on S3 too (and the reverse), because
the rest of shardwise cannot tell them apart. S3-only tests (request counts, retries,
a dead endpoint) use the moto server from ``tests/s3server.py`` and are marked ``s3``.
"""

from __future__ import annotations

import gzip
import io
import json
import multiprocessing as mp
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.config import StorageOptions, reject_secret_keys
from shardwise.errors import ConfigError, StorageError
from shardwise.store.backoff import RetriesExhaustedError, RetryPolicy, call, is_transient
from shardwise.store.location import Location, is_remote

BACKENDS = ["local", pytest.param("s3", marks=pytest.mark.s3)]

MakeLoc = Callable[..., Location]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test."""
    return str(request.param)


@pytest.fixture
def make_loc(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> MakeLoc:
    """``make_loc(prefix)`` -> a Location on the backend under test."""
    if backend == "local":

        def local(prefix: str = "root", **_: Any) -> Location:
            return Location(str(tmp_path / prefix))

        return local
    s3 = request.getfixturevalue("s3")

    def remote(prefix: str = "root", **overrides: Any) -> Location:
        return Location(s3.url(prefix), s3.options(**overrides))

    return remote


# -- naming -------------------------------------------------------------------


def test_is_remote() -> None:
    assert is_remote("s3://b/p")
    assert is_remote("gs://b")
    assert not is_remote("/data/x")
    assert not is_remote("file:///data/x")
    assert not is_remote("relative/dir")


def test_paths_and_urls(make_loc: MakeLoc, backend: str) -> None:
    loc = make_loc("out/put")
    assert loc.url("a/b.txt") == f"{loc.uri}/a/b.txt"
    assert loc.path("a/b.txt").endswith("out/put/a/b.txt")
    if backend == "s3":
        assert loc.uri.startswith("s3://")
        assert not loc.path("x").startswith("s3://")


# -- listing ------------------------------------------------------------------


def test_list_absent_root_is_empty(make_loc: MakeLoc) -> None:
    assert make_loc("nothing/here").list_files() == []


def test_list_files_sorted_with_sizes(make_loc: MakeLoc) -> None:
    loc = make_loc()
    files = {
        "b.jsonl": b"12345",
        "a/x.parquet": b"1",
        "a/deep/er/y.jsonl.gz": b"123",
        "a/x.parquet.done": b"{}",
    }
    for rel, data in files.items():
        loc.write_bytes(rel, data)
    assert loc.list_files() == sorted((rel, len(data)) for rel, data in files.items())


def test_sibling_prefix_is_not_listed(make_loc: MakeLoc) -> None:
    """``out`` must not see ``out2/...``: the listing is of ``out/``, not ``out*``."""
    make_loc("out2").write_bytes("a.txt", b"x")
    make_loc("out").write_bytes("b.txt", b"y")
    assert make_loc("out").list_files() == [("b.txt", 1)]


# -- reading ------------------------------------------------------------------


def test_read_bytes_and_missing(make_loc: MakeLoc) -> None:
    loc = make_loc()
    loc.write_bytes("d/f.bin", b"\x00payload\xff")
    assert loc.read_bytes("d/f.bin") == b"\x00payload\xff"
    with pytest.raises(FileNotFoundError):
        loc.read_bytes("d/absent.bin")
    with pytest.raises(FileNotFoundError):
        loc.open("d/absent.bin")


def test_exists(make_loc: MakeLoc) -> None:
    loc = make_loc()
    assert not loc.exists("f.txt")
    loc.write_bytes("f.txt", b"1")
    assert loc.exists("f.txt")
    assert not loc.exists("f")  # a key prefix is not a file


def test_open_is_seekable(make_loc: MakeLoc) -> None:
    loc = make_loc()
    data = bytes(range(256)) * 64
    loc.write_bytes("s.bin", data)
    with loc.open("s.bin") as fh:
        assert fh.seekable()
        fh.seek(-10, io.SEEK_END)
        assert fh.read() == data[-10:]
        fh.seek(100)
        assert fh.read(5) == data[100:105]


def _parquet_bytes(row_groups: int = 3, rows: int = 200) -> bytes:
    buf = io.BytesIO()
    schema = pa.schema([("id", pa.string()), ("junk", pa.string()), ("text", pa.string())])
    with pq.ParquetWriter(buf, schema, compression="none") as w:
        for g in range(row_groups):
            w.write_table(
                pa.table(
                    {
                        "id": [f"{g}-{i}" for i in range(rows)],
                        "junk": [("j" * 500) + str(i) for i in range(rows)],
                        "text": [f"text {g} {i}" for i in range(rows)],
                    },
                    schema=schema,
                )
            )
    return buf.getvalue()


def test_parquet_column_projection_through_open(make_loc: MakeLoc) -> None:
    loc = make_loc()
    data = _parquet_bytes()
    loc.write_bytes("c/p.parquet", data)
    with loc.open("c/p.parquet") as fh:
        table = pq.ParquetFile(fh).read(columns=["id", "text"])
    assert table.column_names == ["id", "text"]
    assert table.num_rows == 600
    assert table["text"][599].as_py() == "text 2 199"


def test_jsonl_gz_streams_through_open(make_loc: MakeLoc) -> None:
    loc = make_loc()
    lines = [json.dumps({"id": str(i), "text": "t" * (i % 50)}) for i in range(3000)]
    loc.write_bytes("j/f.jsonl.gz", gzip.compress("\n".join(lines).encode()))
    with loc.open("j/f.jsonl.gz") as fh:
        got = [json.loads(line) for line in gzip.GzipFile(fileobj=fh)]
    assert len(got) == 3000
    assert got[-1]["id"] == "2999"


# -- writing ------------------------------------------------------------------


def test_write_replaces_whole_file(make_loc: MakeLoc) -> None:
    loc = make_loc()
    loc.write_bytes("w/f.json", b"old content, longer")
    loc.write_bytes("w/f.json", b"new")
    assert loc.read_bytes("w/f.json") == b"new"
    assert loc.list_files() == [("w/f.json", 3)]  # no temp files left behind


def test_create_if_absent(make_loc: MakeLoc) -> None:
    loc = make_loc()
    assert loc.create_if_absent("run.json", b'{"a": 1}') is True
    assert loc.create_if_absent("run.json", b'{"a": 2}') is False
    assert loc.read_bytes("run.json") == b'{"a": 1}'


def test_remove_is_idempotent(make_loc: MakeLoc) -> None:
    loc = make_loc()
    loc.write_bytes("r/f", b"x")
    loc.remove("r/f")
    loc.remove("r/f")
    assert not loc.exists("r/f")
    assert loc.list_files() == []


def _race_worker(
    uri: str, options: StorageOptions, keys: list[str], me: str, barrier: Any, out: Any
) -> None:
    """One contender: create each key at the same moment as the other process."""
    loc = Location(uri, options)
    won = []
    for key in keys:
        barrier.wait(timeout=60)
        if loc.create_if_absent(key, me.encode()):
            won.append(key)
    out.put((me, won))


def test_create_if_absent_race_two_processes(make_loc: MakeLoc) -> None:
    """Two processes create the same keys at once: each key has exactly one winner,
    and the stored content is the winner's."""
    loc = make_loc()
    keys = [f"race/{i}/run.json" for i in range(12)]
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_race_worker, args=(loc.uri, loc.options, keys, me, barrier, out))
        for me in ("p1", "p2")
    ]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    won1, won2 = set(results["p1"]), set(results["p2"])
    assert not won1 & won2, "a key was created twice"
    assert won1 | won2 == set(keys), "a key was created by nobody"
    for key in keys:
        assert loc.read_bytes(key).decode() == ("p1" if key in won1 else "p2")


# -- config: credentials never come from config ----------------------------------


@pytest.mark.parametrize(
    "cfg",
    [
        {"aws_secret_access_key": "abc"},
        {"aws_access_key_id": "AKIA..."},
        {"key": "x"},
        {"secret": "x"},
        {"session_token": "x"},
        {"password": "x"},
        {"client_kwargs": {"aws_secret_access_key": "x"}},
    ],
)
def test_secret_looking_config_is_rejected(cfg: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as info:
        StorageOptions.from_config(cfg)
    text = str(info.value)
    assert "AWS_ACCESS_KEY_ID" in text
    assert "environment" in text
    for value in ("abc", "AKIA..."):
        assert value not in text  # the error never echoes the secret


def test_reject_secret_keys_before_schema_validation() -> None:
    reject_secret_keys(None)
    reject_secret_keys({"endpoint_url": "https://x", "max_attempts": 3})
    with pytest.raises(ConfigError, match=r"storage\.profile_password") as info:
        reject_secret_keys({"profile_password": "hunter2"})
    assert "hunter2" not in str(info.value)


def test_credentials_in_urls_are_rejected() -> None:
    with pytest.raises(ConfigError, match="environment") as info:
        StorageOptions.from_config({"endpoint_url": "https://AKIAX:s3cr3t@r2.example.com"})
    assert "s3cr3t" not in str(info.value)
    with pytest.raises(ConfigError, match="environment") as info:
        Location("s3://AKIAX:s3cr3t@bucket/prefix")
    assert "s3cr3t" not in str(info.value)


def test_storage_config_validation() -> None:
    opts = StorageOptions.from_config(
        {
            "endpoint_url": "https://acc.r2.cloudflarestorage.com",
            "region": "auto",
            "profile": "r2",
            "connect_timeout": 5,
            "read_timeout": 30.0,
            "max_attempts": 7,
            "addressing_style": "path",
        }
    )
    assert opts.max_attempts == 7
    assert RetryPolicy.of(opts).attempts == 7
    assert StorageOptions.from_config(None) == StorageOptions()
    with pytest.raises(ConfigError, match="unknown"):
        StorageOptions.from_config({"endpoint": "x"})
    with pytest.raises(ConfigError, match="anon"):
        StorageOptions.from_config({"anon": "yes"})
    with pytest.raises(ConfigError, match="max_attempts"):
        StorageOptions.from_config({"max_attempts": 0})
    with pytest.raises(ConfigError, match="addressing_style"):
        StorageOptions.from_config({"addressing_style": "dns"})


# -- retrying (pure) ------------------------------------------------------------


def _client_error(code: str, status: int) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "PutObject",
    )


def test_is_transient_classification() -> None:
    from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

    assert is_transient(_client_error("SlowDown", 503))
    assert is_transient(_client_error("InternalError", 500))
    assert is_transient(_client_error("Whatever", 502))
    assert is_transient(_client_error("Throttling", 400))
    assert is_transient(_client_error("ConditionalRequestConflict", 409))
    assert is_transient(ConnectionResetError())
    assert is_transient(TimeoutError())
    assert is_transient(EndpointConnectionError(endpoint_url="http://x"))
    assert is_transient(ReadTimeoutError(endpoint_url="http://x"))
    wrapped = OSError(5, "wrapped")
    wrapped.__cause__ = _client_error("ServiceUnavailable", 503)
    assert is_transient(wrapped)  # s3fs wraps botocore errors like this
    assert not is_transient(_client_error("AccessDenied", 403))
    assert not is_transient(_client_error("PreconditionFailed", 412))
    assert not is_transient(_client_error("NotImplemented", 501))
    assert not is_transient(FileNotFoundError("k"))
    assert not is_transient(ValueError("bad"))


def test_backoff_is_bounded_and_jittered() -> None:
    policy = RetryPolicy(attempts=6, base_delay=1.0, max_delay=4.0)
    for _ in range(50):
        delays = list(policy.delays())
        assert len(delays) == 5
        assert all(0 <= d <= min(4.0, 2**n) for n, d in enumerate(delays))
    assert len({tuple(policy.delays()) for _ in range(5)}) > 1  # jitter


def test_call_retries_then_gives_up_naming_the_key() -> None:
    attempts: list[int] = []
    sleeps: list[float] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise _client_error("SlowDown", 503)
        return "ok"

    policy = RetryPolicy(attempts=3, base_delay=0.1, max_delay=0.1)
    assert call(flaky, key="s3://b/k", policy=policy, sleep=sleeps.append) == "ok"
    assert len(attempts) == 3
    assert len(sleeps) == 2

    def dead() -> None:
        raise ConnectionResetError("reset by peer")

    with pytest.raises(RetriesExhaustedError) as info:
        call(dead, key="s3://b/some/key.done", policy=policy, sleep=sleeps.append)
    assert isinstance(info.value, StorageError)
    assert "s3://b/some/key.done" in str(info.value)
    assert "reset by peer" in str(info.value)
    assert info.value.attempts == 3

    def final() -> None:
        raise FileNotFoundError("nope")

    with pytest.raises(FileNotFoundError):
        call(final, key="k", policy=policy, sleep=sleeps.append)


# -- S3 only: request counts, retries at the server, dead endpoint -----------------


@pytest.mark.s3
def test_s3_listing_is_paginated_not_probed(s3: Any) -> None:
    """2,001 objects -> 3 LIST pages, no HEAD, no GET."""
    from concurrent.futures import ThreadPoolExecutor

    client = s3.client()
    keys = [f"big/f{i:05d}.jsonl.done" for i in range(2001)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=s3.name, Key=k, Body=b"{}"), keys))
    loc = Location(s3.url("big"), s3.options())
    s3.reset()
    assert len(loc.list_files()) == 2001
    assert s3.counts() == {"LIST": 3}


@pytest.mark.s3
def test_s3_request_counts_per_operation(s3: Any) -> None:
    loc = Location(s3.url("ops"), s3.options())
    loc.write_bytes("a.json", b"{}")
    assert s3.counts() == {"PUT": 1}
    s3.reset()
    assert loc.read_bytes("a.json") == b"{}"
    assert s3.counts() == {"GET": 1}
    s3.reset()
    assert loc.exists("a.json")
    assert not loc.exists("b.json")
    assert s3.counts() == {"HEAD": 2}
    s3.reset()
    assert loc.create_if_absent("run.json", b"1")
    assert not loc.create_if_absent("run.json", b"2")
    assert s3.counts() == {"PUT": 2}
    assert [r.status for r in s3.server.log(s3.name)] == [200, 412]
    assert all(r.conditional for r in s3.server.log(s3.name))
    s3.reset()
    loc.remove("a.json")
    assert s3.counts() == {"DELETE": 1}


@pytest.mark.s3
def test_s3_small_parquet_is_one_get(s3: Any) -> None:
    data = _parquet_bytes(row_groups=2, rows=50)
    loc = Location(s3.url("pq"), s3.options())
    loc.write_bytes("small.parquet", data)
    s3.reset()
    loc.remember_sizes({"small.parquet": len(data)})
    with loc.open("small.parquet") as fh:
        assert pq.ParquetFile(fh).read(columns=["id"]).num_rows == 100
    assert s3.counts() == {"GET": 1}
    s3.reset()
    loc = Location(s3.url("pq"), s3.options())
    with loc.open("small.parquet") as fh:  # size unknown: one HEAD to learn it
        assert pq.ParquetFile(fh).read(columns=["id"]).num_rows == 100
    assert s3.counts() == {"HEAD": 1, "GET": 1}


@pytest.mark.s3
def test_s3_parquet_projection_gets(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A big Parquet read costs one GET for the footer and one per needed column
    chunk; the unneeded column is never downloaded, and a known size saves the HEAD."""
    monkeypatch.setattr("shardwise.store.location.SMALL_FILE_BYTES", 0)  # treat it as big
    data = _parquet_bytes(row_groups=3, rows=200)
    loc = Location(s3.url("pq"), s3.options())
    loc.write_bytes("p.parquet", data)
    pf = pq.ParquetFile(io.BytesIO(data))
    junk = sum(pf.metadata.row_group(g).column(1).total_compressed_size for g in range(3))
    s3.reset()
    loc.remember_sizes({"p.parquet": len(data)})
    with loc.open("p.parquet") as fh:
        table = pq.ParquetFile(fh).read(columns=["id", "text"])
    assert table.num_rows == 600
    counts = s3.counts()
    assert counts.get("HEAD", 0) == 0
    # footer + (id, text) per row group; id and text are separated by junk.
    assert counts["GET"] <= 1 + 2 * 3
    fetched = sum(r.bytes_out for r in s3.server.log(s3.name))
    assert fetched <= len(data) - junk + 64 * 1024  # footer read is at most 64 KiB
    s3.reset()
    loc.remember_sizes({"p.parquet": len(data)})
    with loc.open("p.parquet") as fh:
        pq.ParquetFile(fh).read(columns=["id"])
    assert s3.counts().get("HEAD", 0) == 0
    s3.reset()
    with loc.open("p.parquet") as fh:  # remembered size still applies
        fh.read(4)
    assert s3.counts().get("HEAD", 0) == 0


@pytest.mark.s3
def test_s3_jsonl_stream_gets_one_per_block(s3: Any) -> None:
    import os

    data = gzip.compress(os.urandom(3 * 2**20), compresslevel=1)
    loc = Location(s3.url("j"), s3.options())
    loc.write_bytes("f.jsonl.gz", data)
    s3.reset()
    loc.remember_sizes({"f.jsonl.gz": len(data)})
    with loc.open("f.jsonl.gz", block_size=2**20) as fh:
        assert len(gzip.GzipFile(fileobj=fh).read()) == 3 * 2**20
    gets = s3.counts()["GET"]
    assert gets <= len(data) // 2**20 + 2
    assert sum(r.bytes_out for r in s3.server.log(s3.name)) <= len(data) + 2**20


@pytest.mark.s3
@pytest.mark.parametrize(
    ("op", "kind"),
    [("write", "PUT"), ("read", "GET"), ("list", "LIST"), ("exists", "HEAD"), ("open", "GET")],
)
def test_s3_transient_errors_are_retried(s3: Any, op: str, kind: str) -> None:
    loc = Location(s3.url("rt"), s3.options(max_attempts=4))
    loc.write_bytes("k.json", b'{"ok": 1}')
    s3.reset()
    s3.server.inject(2, kind=kind, status=503, code="SlowDown")
    if op == "write":
        loc.write_bytes("k.json", b'{"ok": 2}')
    elif op == "read":
        assert loc.read_bytes("k.json") == b'{"ok": 1}'
    elif op == "list":
        assert loc.list_files() == [("k.json", 9)]
    elif op == "exists":
        assert loc.exists("k.json")
    else:
        loc.remember_sizes({"k.json": 9})
        with loc.open("k.json") as fh:
            assert fh.read() == b'{"ok": 1}'
    assert s3.counts()[kind] == 3  # 2 x 503, then success: one retry layer only
    assert [r.status for r in s3.server.log(s3.name)][:2] == [503, 503]


@pytest.mark.s3
def test_s3_retry_bound_names_key_and_last_error(s3: Any) -> None:
    loc = Location(s3.url("rt"), s3.options(max_attempts=3))
    s3.server.inject(100, kind="PUT", status=500, code="InternalError")
    with pytest.raises(StorageError) as info:
        loc.write_bytes("a/b.labels.parquet", b"x")
    text = str(info.value)
    assert f"{s3.url('rt')}/a/b.labels.parquet" in text
    assert "InternalError" in text
    assert "3 attempt" in text
    assert s3.counts()["PUT"] == 3


@pytest.mark.s3
def test_s3_final_errors_are_not_retried(s3: Any) -> None:
    loc = Location(s3.url("rt"), s3.options(max_attempts=5))
    s3.server.inject(1, kind="PUT", status=403, code="AccessDenied")
    with pytest.raises(StorageError, match=r"AccessDenied|denied"):
        loc.write_bytes("f", b"x")
    assert s3.counts()["PUT"] == 1


@pytest.mark.s3
def test_s3_conditional_create_conflict_is_retried(s3: Any) -> None:
    """409 ConditionalRequestConflict (a concurrent conditional write) means "retry"."""
    loc = Location(s3.url("c"), s3.options())
    s3.server.inject(1, kind="PUT", status=409, code="ConditionalRequestConflict")
    assert loc.create_if_absent("run.json", b"1") is True
    assert s3.counts()["PUT"] == 2


@pytest.mark.s3
def test_s3_lost_response_on_conditional_create_reports_exists(s3: Any) -> None:
    """The PUT landed but the answer was lost; the retry sees 412 -> False. Callers
    (runmeta) re-read and validate, and find their own content."""
    loc = Location(s3.url("c"), s3.options())
    s3.server.inject(1, kind="PUT", status=503, code="SlowDown", after=True)
    assert loc.create_if_absent("run.json", b"mine") is False
    assert loc.read_bytes("run.json") == b"mine"


@pytest.mark.s3
def test_s3_create_without_conditional_writes(s3: Any) -> None:
    """``conditional_writes: false``: HEAD then PUT (racy; for stores without it)."""
    loc = Location(s3.url("c"), s3.options(conditional_writes=False))
    assert loc.create_if_absent("run.json", b"1") is True
    assert loc.create_if_absent("run.json", b"2") is False
    assert loc.read_bytes("run.json") == b"1"
    assert s3.counts() == {"HEAD": 2, "PUT": 1, "GET": 1}
    assert not any(r.conditional for r in s3.server.log(s3.name))


@pytest.mark.s3
def test_s3_not_implemented_conditional_put_falls_back(s3: Any) -> None:
    loc = Location(s3.url("c"), s3.options())
    s3.server.inject(1, kind="PUT", status=501, code="NotImplemented")
    assert loc.create_if_absent("run.json", b"1") is True
    assert loc.read_bytes("run.json") == b"1"


@pytest.mark.s3
def test_s3_server_down_fails_cleanly_then_recovers(s3: Any) -> None:
    loc = Location(s3.url("down"), s3.options(max_attempts=3, connect_timeout=1.0))
    loc.write_bytes("a", b"1")
    s3.server.stop()
    try:
        with pytest.raises(StorageError) as info:
            loc.write_bytes("b.done", b"2")
        assert f"{s3.url('down')}/b.done" in str(info.value)
        assert "3 attempt" in str(info.value)
        with pytest.raises(StorageError):
            loc.list_files()
    finally:
        s3.server.start()
    loc.write_bytes("b.done", b"2")
    assert loc.list_files() == [("a", 1), ("b.done", 1)]


@pytest.mark.s3
def test_s3_server_stopped_mid_read(s3: Any) -> None:
    """A stream that loses its server mid-file fails with a StorageError, not garbage."""
    import os

    data = os.urandom(3 * 2**20)
    loc = Location(s3.url("mid"), s3.options(max_attempts=2))
    loc.write_bytes("f.jsonl", data)
    loc.remember_sizes({"f.jsonl": len(data)})
    with loc.open("f.jsonl", block_size=2**20) as fh:
        first = fh.read(10)
        s3.server.stop()
        try:
            with pytest.raises(StorageError, match=r"f\.jsonl"):
                fh.read()
        finally:
            s3.server.start()
    assert first == data[:10]


@pytest.mark.s3
def test_s3_no_secret_in_options_or_repr(s3: Any) -> None:
    """The secret lives in the environment only: nothing shardwise holds carries it."""
    loc = Location(s3.url("cred"), s3.options())
    loc.write_bytes("x", b"1")
    for text in (repr(loc), repr(loc.options), loc.uri, loc.url("x"), loc.path("x")):
        assert s3.server.secret not in text


@pytest.mark.s3
def test_no_credentials_at_all_is_one_line_naming_the_url_and_where_they_go(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    # options no other test uses: fsspec would hand back a cached client that has keys
    loc = Location(s3.url("corpus"), s3.options(read_timeout=9.75))
    for attempt in (loc.list_files, lambda: loc.read_bytes("a.jsonl")):
        with pytest.raises(StorageError) as info:
            attempt()
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith(s3.url("corpus"))
        assert "no S3 credentials found" in message
        assert "AWS_ACCESS_KEY_ID" in message and "storage.profile" in message
        cause = info.value.__cause__  # no botocore chain for a traceback to print
        assert cause is None or isinstance(cause, StorageError)


def test_a_symlink_loop_under_the_root_is_one_error_naming_the_link(tmp_path: Path) -> None:
    """It printed the looping path forty levels deep, with no advice."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.jsonl").write_text("{}\n")
    (tmp_path / "a" / "b" / "loop").symlink_to("..")
    (tmp_path / "c").symlink_to(tmp_path / "a" / "b")  # a link that is no loop: followed
    loc = Location(str(tmp_path))
    want = (
        f"cannot list {tmp_path}: the symbolic link a/b/loop points to {tmp_path / 'a'}, a "
        "folder above it (a loop); remove the link, or point input.uri at a tree without one"
    )
    for listing in (loc.list_entries, loc.list_names):
        with pytest.raises(StorageError) as e:
            listing()
        assert str(e.value) == want
    (tmp_path / "a" / "b" / "loop").unlink()
    assert loc.list_names() == ["a/b/x.jsonl", "c/x.jsonl"]
