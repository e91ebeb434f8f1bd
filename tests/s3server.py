"""Pytest fixtures: a real S3-protocol HTTP server (moto) on 127.0.0.1.

Why a server and not ``mock_aws``: shardwise talks to S3 through s3fs/aiobotocore in
the test process *and* in Snakemake's subprocesses, so the only honest fake is one
reachable over HTTP. Moto's WSGI app runs in a thread of the pytest process; its
state lives in this process, so it survives a stop/restart of the HTTP server.

What the fixture adds around moto, as a WSGI middleware:

* **request counting** by kind (LIST, GET, HEAD, PUT, DELETE, ...), so tests can put
  a number on "listing, not probing";
* **fault injection**: answer the first ``k`` matching requests with 503 SlowDown (or
  any status) without touching botocore, so retries are exercised end to end;
* **atomic conditional PUTs**: moto 5.2.5 honours ``If-None-Match: *`` and ``If-Match``
  on PutObject, but checks-then-writes without a lock; real S3/R2/MinIO decide
  atomically. The middleware serialises conditional PUTs (and DELETEs) so a race test
  measures shardwise, not a moto race window; ``honour_conditional_writes = False``
  drops the conditions: a store that ignores them;
* **stop/restart** on the same port, closing open keep-alive connections, so a client
  really sees a dead endpoint mid-run.

Credentials are fake, set in the environment (the only place shardwise reads them
from); ``S3Server.secret`` is the secret's value, for "never written anywhere" scans.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

import pytest

REGION = "us-east-1"

#: Query parameters that make a bucket-level GET a listing.
_LIST_PARAMS = {"list-type", "prefix", "delimiter", "continuation-token", "marker", "max-keys"}


@dataclass
class Request:
    """One request as seen by the server (after fault injection decided)."""

    method: str
    kind: str
    bucket: str
    key: str
    status: int
    bytes_out: int
    conditional: bool


@dataclass
class Fault:
    """Answer the next ``times`` requests matching ``method``/``key`` with an error."""

    times: int
    status: int = 503
    code: str = "SlowDown"
    method: str | None = None
    kind: str | None = None
    key: Callable[[str], bool] | str | None = None
    #: Let the request reach moto first, then answer the error: a "lost response"
    #: (the write happened, the client never heard), as after a timeout.
    after: bool = False
    hits: int = 0

    def matches(self, method: str, kind: str, key: str) -> bool:
        """Whether this fault applies to a request (and still has shots left)."""
        if self.hits >= self.times:
            return False
        if self.method and self.method != method:
            return False
        if self.kind and self.kind != kind:
            return False
        if isinstance(self.key, str):
            return key == self.key or key.endswith("/" + self.key)
        if callable(self.key):
            return bool(self.key(key))
        return True


@dataclass
class Hold:
    """Hold the next request matching ``method``/``kind``/``key`` (the filters of
    :class:`Fault`) until :meth:`release`: a slow upload, a stalled connection. It then
    reaches moto as it was sent. ``reached`` is set when the request arrives."""

    filters: Fault
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)  # moto has answered it

    def release(self) -> None:
        """Let the held request through."""
        self.released.set()


def classify(method: str, path: str, query: str, headers: dict[str, str]) -> tuple[str, str, str]:
    """(kind, bucket, key) of a path-style S3 request."""
    parts = unquote(path).lstrip("/").split("/", 1)
    bucket = parts[0]
    key = parts[1] if len(parts) > 1 else ""
    params = parse_qs(query, keep_blank_values=True)
    if method == "GET":
        if not key:
            return ("LIST" if not params or _LIST_PARAMS & set(params) else "BUCKET"), bucket, key
        return "GET", bucket, key
    if method == "HEAD":
        return ("HEAD" if key else "HEAD_BUCKET"), bucket, key
    if method == "PUT":
        if not key:
            return "BUCKET", bucket, key
        if "partNumber" in params:
            return "PUT_PART", bucket, key
        if "HTTP_X_AMZ_COPY_SOURCE" in headers:
            return "COPY", bucket, key
        return "PUT", bucket, key
    if method == "POST":
        if "delete" in params:
            return "DELETE", bucket, key
        return "MPU", bucket, key
    if method == "DELETE":
        return ("DELETE" if key else "BUCKET"), bucket, key
    return method, bucket, key


class _Middleware:
    """WSGI wrapper around moto: counts, injects faults, serialises conditional PUTs."""

    def __init__(self, app: Any, server: S3Server) -> None:
        self.app = app
        self.server = server

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        method = environ["REQUEST_METHOD"]
        kind, bucket, key = classify(
            method, environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""), environ
        )
        conditional = method in ("PUT", "DELETE") and (
            environ.get("HTTP_IF_NONE_MATCH") == "*" or "HTTP_IF_MATCH" in environ
        )
        if conditional and not self.server.honour_conditional_writes:
            environ.pop("HTTP_IF_NONE_MATCH", None)  # a store that ignores the conditions
            environ.pop("HTTP_IF_MATCH", None)
        if conditional and not self.server.honour_if_match:
            environ.pop("HTTP_IF_MATCH", None)  # older MinIO: If-None-Match only
        serialize = conditional and self.server.serialize_conditional_puts
        held = self.server._take_hold(method, kind, key)
        if held is not None:
            held.reached.set()
            held.released.wait(timeout=600)
        fault = self.server._take_fault(method, kind, key)
        if fault is not None and fault.after:
            with self.server._conditional_lock if serialize else contextlib.nullcontext():
                list(self.app(environ, lambda *a, **k: lambda _b: None))
        if fault is not None:
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{fault.code}</Code><Message>injected by tests/s3server.py"
                f"</Message><Key>{key}</Key></Error>"
            ).encode()
            # Drain the request body so the connection stays usable (keep-alive).
            length = int(environ.get("CONTENT_LENGTH") or 0)
            if length and not fault.after:
                environ["wsgi.input"].read(length)
            start_response(
                f"{fault.status} Injected",
                [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
            )
            self.server._record(Request(method, kind, bucket, key, fault.status, 0, conditional))
            return [body]

        seen: dict[str, Any] = {}

        def _start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            seen["status"] = int(status.split(maxsplit=1)[0])
            if not self.server.send_date:  # a store whose replies carry no Date
                headers = [(n, v) for n, v in headers if n.lower() != "date"]
            for name, value in headers:
                if name.lower() == "content-length":
                    seen["bytes"] = int(value)
            return start_response(status, headers, exc_info)

        lock = self.server._conditional_lock if serialize else contextlib.nullcontext()
        with lock:
            # Consume the whole response under the lock: moto decides in the app call.
            chunks = list(self.app(environ, _start))
        if held is not None:
            held.done.set()
        self.server._record(
            Request(
                method,
                kind,
                bucket,
                key,
                seen.get("status", 0),
                # A HEAD's Content-Length is the object's size, but no body is sent.
                0 if method == "HEAD" else seen.get("bytes", sum(len(c) for c in chunks)),
                conditional,
            )
        )
        return chunks


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    """A moto S3 server on 127.0.0.1 that can count, fail on purpose, stop and restart."""

    port: int = field(default_factory=_free_port)
    secret: str = field(default_factory=lambda: "sw-fake-secret-" + secrets.token_hex(12))
    access_key: str = field(default_factory=lambda: "SWFAKE" + secrets.token_hex(6).upper())
    serialize_conditional_puts: bool = True
    #: False: a store that ignores If-None-Match / If-Match (writes unconditionally)
    honour_conditional_writes: bool = True
    #: False: a store that honours If-None-Match but ignores If-Match (older MinIO)
    honour_if_match: bool = True
    #: False: replies without a Date header
    send_date: bool = True
    requests: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._conditional_lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._sockets: set[socket.socket] = set()
        self._app: Any = None
        self._hooks: list[Callable[[Request], None]] = []

    # -- addressing -----------------------------------------------------------
    @property
    def endpoint_url(self) -> str:
        """What goes into ``storage.endpoint_url``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the HTTP server is accepting connections."""
        return self._server is not None

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> None:
        """Start (or restart) serving on ``self.port``; moto's state is kept."""
        if self._server is not None:
            return
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import ThreadedWSGIServer

        if self._app is None:
            self._app = _Middleware(DomainDispatcherApplication(create_backend_app), self)
        tracked = self._sockets
        guard = self._lock
        owner = self

        class _Quiet(MotoRequestHandler):
            """Moto's handler without a log line per request (and, with ``send_date``
            false, without the Date header werkzeug adds)."""

            def send_header(self, keyword: str, value: str) -> None:
                if keyword.lower() == "date" and not owner.send_date:
                    return
                super().send_header(keyword, value)

            def log_request(self, *args: Any, **kwargs: Any) -> None:
                pass

            def log_error(self, *args: Any, **kwargs: Any) -> None:
                pass

        class _Server(ThreadedWSGIServer):
            """Remembers client sockets so ``stop`` can cut keep-alive connections."""

            def process_request(self, request: Any, client_address: Any) -> None:
                with guard:
                    tracked.add(request)
                super().process_request(request, client_address)

            def shutdown_request(self, request: Any) -> None:
                with guard:
                    tracked.discard(request)
                super().shutdown_request(request)

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a connection cut by stop() is expected, not news

        server = _Server("127.0.0.1", self.port, self._app, handler=_Quiet)
        thread = threading.Thread(target=server.serve_forever, name="moto-s3", daemon=True)
        thread.start()
        self._server, self._thread = server, thread

    def stop(self) -> None:
        """Stop serving and cut open connections: clients now get refused/reset."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._server = self._thread = None
        server.shutdown()
        server.server_close()
        with self._lock:
            open_sockets = list(self._sockets)
            self._sockets.clear()
        for sock in open_sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
        if thread is not None:
            thread.join(timeout=10)

    def restart(self) -> None:
        """Stop, then start again on the same port (objects survive)."""
        self.stop()
        self.start()

    # -- counting -------------------------------------------------------------
    def _record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)
            hooks = list(self._hooks)
        for hook in hooks:
            hook(req)

    def on_request(self, hook: Callable[[Request], None]) -> None:
        """Call ``hook(request)`` after each request (from the server thread)."""
        with self._lock:
            self._hooks.append(hook)

    def reset(self) -> None:
        """Forget counted requests, faults and hooks (between tests)."""
        with self._lock:
            self.requests.clear()
            self.faults.clear()
            for held in self.holds:
                held.release()
            self.holds.clear()
            self._hooks.clear()
            self.honour_conditional_writes = True
            self.honour_if_match = True
            self.send_date = True

    def counts(self, bucket: str | None = None) -> Counter[str]:
        """Requests per kind so far (optionally for one bucket)."""
        with self._lock:
            return Counter(r.kind for r in self.requests if bucket is None or r.bucket == bucket)

    def log(self, bucket: str | None = None) -> list[Request]:
        """A copy of the request log."""
        with self._lock:
            return [r for r in self.requests if bucket is None or r.bucket == bucket]

    # -- faults ---------------------------------------------------------------
    def inject(self, times: int, **kwargs: Any) -> Fault:
        """Fail the next ``times`` matching requests (see ``Fault`` for the filters)."""
        fault = Fault(times=times, **kwargs)
        with self._lock:
            self.faults.append(fault)
        return fault

    def hold(self, **filters: Any) -> Hold:
        """Hold the next matching request until the returned :class:`Hold` is released."""
        held = Hold(Fault(times=1, **filters))
        with self._lock:
            self.holds.append(held)
        return held

    def _take_hold(self, method: str, kind: str, key: str) -> Hold | None:
        with self._lock:
            for held in self.holds:
                if held.filters.matches(method, kind, key):
                    held.filters.hits += 1
                    return held
        return None

    def _take_fault(self, method: str, kind: str, key: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, kind, key):
                    fault.hits += 1
                    return fault
        return None


@dataclass
class S3Bucket:
    """A fresh bucket on the shared server, with helpers for tests."""

    server: S3Server
    name: str

    def url(self, prefix: str = "") -> str:
        """``s3://bucket/prefix`` for config and ``Location``."""
        return f"s3://{self.name}/{prefix}".rstrip("/")

    def options(self, **overrides: Any) -> Any:
        """``StorageOptions`` pointing at the server, with fast retries for tests."""
        from shardwise.config import StorageOptions

        values: dict[str, Any] = {
            "endpoint_url": self.server.endpoint_url,
            "region": REGION,
            "connect_timeout": 2.0,
            "read_timeout": 10.0,
            "max_attempts": 4,
            "backoff_base": 0.01,
            "backoff_max": 0.05,
        }
        values.update(overrides)
        return StorageOptions(**values)

    def storage_config(self) -> dict[str, Any]:
        """The ``storage:`` mapping of a workflow config for this server.

        Only keys that ``config/schema.yaml`` accepts; few attempts so a dead server
        fails a job in seconds.
        """
        return {
            "endpoint_url": self.server.endpoint_url,
            "region": REGION,
            "connect_timeout": 2.0,
            "read_timeout": 20.0,
            "max_attempts": 3,
        }

    def client(self) -> Any:
        """A plain boto3 client for setup and inspection (its requests are counted too)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.server.endpoint_url, region_name=REGION)

    def counts(self) -> Counter[str]:
        """Requests to this bucket per kind since the last ``reset``."""
        return self.server.counts(self.name)

    def reset(self) -> None:
        """Forget counted requests, faults and hooks."""
        self.server.reset()

    def put(self, key: str, data: bytes) -> None:
        """Upload one object (setup helper)."""
        self.client().put_object(Bucket=self.name, Key=key, Body=data)

    def get(self, key: str) -> bytes:
        """Download one object (inspection helper)."""
        return self.client().get_object(Bucket=self.name, Key=key)["Body"].read()

    def keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` (inspection helper)."""
        out: list[str] = []
        paginator = self.client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.name, Prefix=prefix):
            out.extend(obj["Key"] for obj in page.get("Contents", []))
        return sorted(out)


#: Environment the fixture sets: fake credentials, and nothing that could point
#: boto at a real account, profile or metadata service.
def _fake_env(server: S3Server, tmp: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": server.access_key,
        "AWS_SECRET_ACCESS_KEY": server.secret,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_SHARED_CREDENTIALS_FILE": os.path.join(tmp, "no-credentials"),
        "AWS_CONFIG_FILE": os.path.join(tmp, "no-config"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


_UNSET = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One moto server for the session, fake credentials in the environment."""
    pytest.importorskip("moto")
    server = S3Server()
    tmp = str(tmp_path_factory.mktemp("aws"))
    with pytest.MonkeyPatch.context() as mp:
        for name in _UNSET:
            mp.delenv(name, raising=False)
        for name in list(os.environ):
            if name.startswith("AWS_ENDPOINT_URL_"):
                mp.delenv(name)
        for name, value in _fake_env(server, tmp).items():
            mp.setenv(name, value)
        server.start()
        try:
            yield server
        finally:
            server.stop()


_bucket_numbers = itertools.count()


@pytest.fixture
def s3(s3_server: S3Server) -> Iterator[S3Bucket]:
    """A fresh, empty bucket; the server is running, counters and faults are clear."""
    s3_server.start()
    s3_server.reset()
    name = f"sw-{os.getpid()}-{next(_bucket_numbers)}"
    bucket = S3Bucket(s3_server, name)
    bucket.client().create_bucket(Bucket=name)
    s3_server.reset()
    try:
        yield bucket
    finally:
        s3_server.reset()
        s3_server.start()
