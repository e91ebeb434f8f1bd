"""One code path for local folders and object stores (``s3://``, any fsspec URL).

A ``Location`` is a root plus a filesystem. Everything else in shardwise speaks in
paths relative to a root (``cc/science/part-7.jsonl.gz``), so a corpus can move
between a mount and a bucket without re-sharding, and a relative path can never
escape its root (the planner refuses such names: ``run.manifest.unsafe_reason``).

Local roots use plain ``os`` calls (atomic temp+rename, create-by-link). Remote
roots go through fsspec; for S3 (and R2, MinIO, Ceph) shardwise talks to s3fs's
client directly where that saves requests:

* a listing is one paginated ``ListObjectsV2`` (1,000 keys a page), never a HEAD
  per file, and never the extra HEAD/LIST s3fs's ``find`` adds for an empty prefix;
* a whole-object PUT is atomic by nature: a reader sees the old object, the new one
  or none, so no temp+rename is needed;
* ``create_if_absent`` is a conditional PUT (``If-None-Match: *``), atomic on S3, R2
  and MinIO; ``exists`` is one HEAD, ``remove`` one DELETE, ``read_bytes`` one GET.

Every remote request is retried by ``shardwise.store.backoff`` (bounded exponential
backoff with jitter) and by nothing else: botocore's and s3fs's own retry loops are
switched off here, so a bound in config is the real bound, and a test can count the
attempts at the server.

Credentials are never part of this module's inputs: the config may not carry them
(``config.StorageOptions.from_config``) and neither may a URL (``user:pass@``); botocore
finds them in the environment, the AWS profile files, or the instance role.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

from shardwise.config import StorageOptions, reject_credentials_in_url
from shardwise.errors import StorageError
from shardwise.store.atomic import create_exclusive, write_atomic
from shardwise.store.backoff import RetryPolicy, call, describe, error_chain

T = TypeVar("T")

log = logging.getLogger("shardwise.store.location")

#: Read-buffer size for remote files. Big enough that a JSONL stream costs one GET
#: per 16 MiB and a Parquet column chunk usually one GET; small enough to bound memory
#: per open file (s3fs's default is 50 MiB).
DEFAULT_BLOCK_SIZE = 16 * 2**20

#: Parquet files up to this size are fetched whole in one GET (one round trip beats
#: footer + column-chunk GETs when the unneeded columns cost only milliseconds).
SMALL_FILE_BYTES = 4 * 2**20

#: Files read by seeking (footer first, then column chunks): no read-ahead for them.
RANDOM_ACCESS_SUFFIXES = (".parquet", ".pq")

_S3_PROTOCOLS = ("s3", "s3a")


def is_remote(uri: str) -> bool:
    """True for ``scheme://`` URLs other than ``file://``."""
    return "://" in uri and not uri.startswith("file://")


class Location:
    """A root directory or prefix, local or remote, addressed by relative paths."""

    def __init__(self, uri: str, options: StorageOptions | None = None) -> None:
        self.uri = uri.rstrip("/") if uri not in ("/",) else uri
        self.options = options or StorageOptions()
        self.remote = is_remote(uri)
        self.protocol = uri.split("://", 1)[0].lower() if self.remote else "file"
        self.is_s3 = self.protocol in _S3_PROTOCOLS
        self._policy = RetryPolicy.of(self.options)
        self._sizes: dict[str, int] = {}
        if self.remote:
            hidden = f"{self.protocol}://***@{uri.rsplit('@', maxsplit=1)[-1]}"
            reject_credentials_in_url(uri, f"storage URL {hidden}")
            self.fs, self.root = _remote_filesystem(self.uri, self.options)
            self.root = self.root.rstrip("/")
            self.bucket, _, self.prefix = self.root.partition("/")
        else:
            path = uri.removeprefix("file://")
            self.fs = None
            self.root = str(Path(path).absolute())
            self.bucket, self.prefix = "", self.root

    def __repr__(self) -> str:
        return f"Location({self.uri!r})"

    # -- naming ---------------------------------------------------------------
    def path(self, rel: str) -> str:
        """The full path (local) or key (remote, without scheme) of ``rel``."""
        return f"{self.root}/{rel}" if rel else self.root

    def url(self, rel: str) -> str:
        """A human-readable address of ``rel`` for messages."""
        return f"{self.uri}/{rel}" if rel else self.uri

    def address(self, rel: str) -> str:
        """The full address of ``rel`` another tool opens: an absolute local path, or
        ``<protocol>://<bucket>/<key>``."""
        return self.path(rel) if not self.remote else f"{self.protocol}://{self.path(rel)}"

    def inner_prefix(self, other: Location) -> str | None:
        """Where ``other``'s root lies inside this root: ``""`` (the same root), ``"a/b/"``
        (a folder below it), or None (elsewhere: another store, bucket or folder).

        Input and output may share a root or nest; the planner and ``verify`` must then
        tell the corpus from shardwise's own outputs.
        """
        if self.protocol != other.protocol:
            return None
        if other.root == self.root:
            return ""
        base = self.root.rstrip("/") + "/"
        if other.root.startswith(base):
            return other.root[len(base) :] + "/"
        return None

    def _key(self, rel: str) -> str:
        """The object key of ``rel`` inside ``self.bucket`` (S3 only)."""
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _size(self, rel: str) -> int:
        """One HEAD for a remote file's size; FileNotFoundError if absent."""
        info = self._retry(rel, lambda: self.fs.info(self.path(rel)))
        size = int(info.get("size") or 0)
        self._sizes[rel] = size
        return size

    # -- plumbing -------------------------------------------------------------
    def _retry(self, rel: str, fn: Callable[[], T]) -> T:
        """Run one remote request under the retry policy; errors name ``rel``'s URL."""
        return call(fn, key=self.url(rel), policy=self._policy)

    @contextlib.contextmanager
    def _reading(self, verb: str, rel: str) -> Iterator[None]:
        """A read's storage errors as one StorageError naming the object; an absent one
        stays FileNotFoundError (callers treat it as "not there")."""
        try:
            yield
        except FileNotFoundError:
            raise
        except (OSError, ValueError, StorageError) as e:
            raise self._fail(verb, rel, e) from e

    def _fail(self, verb: str, rel: str, err: BaseException) -> StorageError:
        """A ``StorageError`` for a final error; retry exhaustion already names the key."""
        if isinstance(err, StorageError):
            return err
        return StorageError(f"cannot {verb} {self.url(rel)}: {describe(err)}")

    # -- listing --------------------------------------------------------------
    def list_files(self) -> list[tuple[str, int]]:
        """Every file below the root as (relative path, size), sorted; one listing."""
        return [(rel, size) for rel, size, _version in self.list_entries()]

    def list_entries(self) -> list[tuple[str, int, str]]:
        """Every file below the root as (relative path, size, version), sorted; one listing.

        ``version`` is what the listing says about a file's content besides its size,
        at no extra request: the modification time (ns) locally, the ETag on S3,
        whatever of the two another fsspec store lists ("" when none). A file changed
        in place gets another (size, version).
        """
        try:
            if self.is_s3:
                out = list(self._list_s3())
            elif self.remote:
                out = list(self._list_fsspec())
            else:
                root = Path(self.root)
                if not root.is_dir():
                    return []
                out = list(_walk_local(root))
        except StorageError:
            raise
        except (OSError, ValueError) as e:
            raise self._fail("list", "", e) from e
        out.sort()
        return out

    def _list_s3(self) -> Iterator[tuple[str, int, str]]:
        """One paginated ListObjectsV2 under the prefix; each page retried on its own."""
        prefix = f"{self.prefix}/" if self.prefix else ""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            page = self._retry("", lambda kw=dict(kwargs): self.fs.call_s3("list_objects_v2", **kw))
            for obj in page.get("Contents", ()):
                key = obj["Key"]
                if key.endswith("/"):
                    continue  # a "folder" placeholder some tools create
                etag = str(obj.get("ETag") or "").strip('"')
                yield key[len(prefix) :], int(obj.get("Size") or 0), etag
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            kwargs["ContinuationToken"] = token

    def _list_fsspec(self) -> Iterator[tuple[str, int, str]]:
        """Any other fsspec backend: its recursive ``find``."""
        try:
            found = self._retry("", lambda: self.fs.find(self.root, detail=True))
        except FileNotFoundError:
            return
        prefix = self.root + "/"
        for key, info in found.items():
            if info.get("type") == "directory" or not key.startswith(prefix):
                continue
            version = info.get("ETag") or info.get("etag") or info.get("mtime") or ""
            yield key[len(prefix) :], int(info.get("size") or 0), str(version).strip('"')

    def list_names(self) -> list[str]:
        """Every file below the root (relative paths, sorted), without sizes: locally no
        stat per file, which is most of a listing's time on a network filesystem."""
        if self.remote:
            return [rel for rel, _ in self.list_files()]
        root = Path(self.root)
        if not root.is_dir():
            return []
        try:
            return sorted(_walk_local_names(root))
        except OSError as e:
            raise self._fail("list", "", e) from e

    def list_suffix(self, suffix: str) -> set[str]:
        """Relative paths of files ending in ``suffix`` (one listing, no per-file probes)."""
        return {rel for rel, _ in self.list_files() if rel.endswith(suffix)}

    # -- reading --------------------------------------------------------------
    def remember_sizes(self, sizes: Mapping[str, int]) -> None:
        """Record file sizes known from a listing or the plan.

        ``open`` then needs no HEAD to learn a remote file's size: over a shard of
        1,000 files that is 1,000 requests saved. (Not filled by ``list_files``: a
        planner's listing can hold millions of files it never opens.)
        """
        self._sizes.update(sizes)

    def open(
        self,
        rel: str,
        *,
        size: int | None = None,
        block_size: int | None = None,
        cache_type: str | None = None,
    ) -> IO[bytes]:
        """Open ``rel`` for streaming reads: seekable and buffered on remote stores.

        Remote Parquet files are opened without read-ahead (``cache_type="none"``):
        pyarrow asks for the footer and then exactly the projected column chunks, one
        ranged GET each, so unneeded columns are never downloaded. A small one (up to
        ``SMALL_FILE_BYTES``) is fetched whole in one GET instead: one round trip beats
        two or more. Other files (JSONL streams) get a ``block_size`` read-ahead
        buffer: one GET per block, memory near one block per open file. The size comes
        from ``size`` or ``remember_sizes``; only when unknown does a HEAD find it.
        Every GET is retried on its own; FileNotFoundError if ``rel`` is absent.
        """
        if not self.remote:
            with self._reading("open", rel):
                return Path(self.path(rel)).open("rb")
        if size is None:
            size = self._sizes.get(rel)
        if cache_type is None and rel.endswith(RANDOM_ACCESS_SUFFIXES):
            if size is None:  # s3fs would HEAD for it anyway; learn it first to choose
                with self._reading("open", rel):
                    size = self._size(rel)
            if size <= SMALL_FILE_BYTES:
                return io.BytesIO(self.read_bytes(rel))
            cache_type = "none"
        return self._open_remote(rel, size, block_size or DEFAULT_BLOCK_SIZE, cache_type)

    def _open_remote(
        self, rel: str, size: int | None, block_size: int, cache_type: str | None
    ) -> IO[bytes]:
        """An fsspec file with a read-ahead buffer whose every GET is retried."""
        path = self.path(rel)
        kwargs: dict[str, Any] = {"block_size": block_size, "cache_type": cache_type or "readahead"}
        if size is not None:
            kwargs["size"] = size
        with self._reading("open", rel):
            fh = self._retry(rel, lambda: self.fs.open(path, "rb", **kwargs))
        if size is not None and getattr(fh, "_details", "absent") is None:
            # s3fs asks for ``details`` (a HEAD) on the first read even when the size
            # is known; what it uses them for (an ETag check) is off by default.
            fh._details = {"name": path, "size": size, "type": "file"}
        cache = getattr(fh, "cache", None)
        fetcher = getattr(cache, "fetcher", None)
        if fetcher is not None:
            cache.fetcher = _RetryingFetcher(fetcher, self.url(rel), self._policy)
        return fh

    def read_bytes(self, rel: str) -> bytes:
        """Read a whole (small) file; FileNotFoundError if it is absent. One GET remotely."""
        if not self.remote:
            try:
                with open(self.path(rel), "rb") as fh:  # noqa: PTH123 - hot: Path() costs more than reading a small file
                    return fh.read()
            except FileNotFoundError:
                raise
            except OSError as e:
                raise self._fail("read", rel, e) from e
        with self._reading("read", rel):
            # max_concurrency=1: one GET, no HEAD to plan parallel ranged reads.
            return self._retry(rel, lambda: self.fs.cat_file(self.path(rel), max_concurrency=1))

    def exists(self, rel: str) -> bool:
        """One probe (a HEAD remotely); prefer ``list_suffix`` for many files."""
        if not self.remote:
            return Path(self.path(rel)).exists()
        try:
            if self.is_s3:
                self._retry(
                    rel,
                    lambda: self.fs.call_s3("head_object", Bucket=self.bucket, Key=self._key(rel)),
                )
                return True
            return bool(self._retry(rel, lambda: self.fs.exists(self.path(rel))))
        except FileNotFoundError:
            return False
        except (OSError, ValueError, StorageError) as e:
            if _http_status(e) == 404:
                return False
            raise self._fail("check", rel, e) from e

    # -- writing --------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write ``rel`` atomically: readers see the old object, the new one, or none."""
        try:
            if self.remote:
                self._retry(rel, lambda: self.fs.pipe_file(self.path(rel), data))
            else:
                write_atomic(Path(self.path(rel)), data)
        except (OSError, ValueError, StorageError) as e:
            raise self._fail("write", rel, e) from e

    def create_if_absent(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` unless it exists; False when it already did (never overwrites).

        On S3 this is one conditional PUT (``If-None-Match: *``): of two racing writers
        exactly one gets True. A retried PUT whose first try did land answers 412 and
        so reports False; callers re-read and validate the content, which is theirs.
        """
        try:
            if not self.remote:
                return create_exclusive(Path(self.path(rel)), data)
            if self.is_s3 and self.options.conditional_writes:
                return self._create_conditional(rel, data)
            return self._create_check_then_put(rel, data)
        except (OSError, ValueError, StorageError) as e:
            raise self._fail("create", rel, e) from e

    def _create_conditional(self, rel: str, data: bytes) -> bool:
        try:
            self._retry(
                rel,
                lambda: self.fs.call_s3(
                    "put_object",
                    Bucket=self.bucket,
                    Key=self._key(rel),
                    Body=data,
                    IfNoneMatch="*",
                ),
            )
        except (OSError, StorageError) as e:
            if isinstance(e, FileExistsError) or _http_status(e) == 412:
                return False
            if _http_status(e) == 501 or _error_code(e) == "NotImplemented":
                _warn_no_conditional_writes(self)
                return self._create_check_then_put(rel, data)
            raise
        finally:
            self.fs.invalidate_cache(self.path(rel))
        return True

    def _create_check_then_put(self, rel: str, data: bytes) -> bool:
        """Fallback where the store has no conditional PUT: racy (see docs/storage.md)."""
        if self.exists(rel):
            return False
        self.write_bytes(rel, data)
        return True

    def remove(self, rel: str) -> None:
        """Delete ``rel`` if present (one idempotent DELETE on S3)."""
        try:
            if not self.remote:
                Path(self.path(rel)).unlink(missing_ok=True)
            elif self.is_s3:
                self._retry(
                    rel,
                    lambda: self.fs.call_s3(
                        "delete_object", Bucket=self.bucket, Key=self._key(rel)
                    ),
                )
            elif self.exists(rel):
                self._retry(rel, lambda: self.fs.rm_file(self.path(rel)))
        except FileNotFoundError:
            return
        except (OSError, ValueError, StorageError) as e:
            raise self._fail("remove", rel, e) from e


class _RetryingFetcher:
    """Wraps a remote file's ranged-GET function so each GET is retried on its own."""

    def __init__(self, fetcher: Callable[[int, int], bytes], key: str, policy: RetryPolicy):
        self.fetcher = fetcher
        self.key = key
        self.policy = policy

    def __call__(self, start: int, end: int) -> bytes:
        return call(
            lambda: self.fetcher(start, end), key=f"{self.key} [{start}:{end}]", policy=self.policy
        )


def _walk_local(root: Path) -> Iterator[tuple[str, int, str]]:
    """Recursive scandir: one stat per entry that scandir already returns."""
    stack = [(str(root), "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as it:
            for entry in it:
                rel = f"{prefix}{entry.name}"
                if _is_dir(entry, root, rel):
                    stack.append((entry.path, rel + "/"))
                elif entry.is_file(follow_symlinks=True):
                    stat = entry.stat()
                    yield rel, stat.st_size, str(stat.st_mtime_ns)


def _walk_local_names(root: Path) -> Iterator[str]:
    """Recursive scandir, names only (the entry type comes with the listing)."""
    stack = [(str(root), "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as it:
            for entry in it:
                rel = f"{prefix}{entry.name}"
                if _is_dir(entry, root, rel):
                    stack.append((entry.path, rel + "/"))
                elif entry.is_file(follow_symlinks=True):
                    yield rel


def _is_dir(entry: os.DirEntry[str], root: Path, rel: str) -> bool:
    """A directory to descend into; a link back to a folder above it (a loop) is refused,
    naming the link: otherwise the walk repeats the loop until the OS says ELOOP."""
    if not entry.is_dir(follow_symlinks=True):
        return False
    if entry.is_symlink():
        target = os.path.realpath(entry.path)
        here = os.path.realpath(Path(entry.path).parent)
        if here == target or here.startswith(target.rstrip("/") + "/"):
            msg = (
                f"cannot list {root}: the symbolic link {rel} points to {target}, a folder "
                "above it (a loop); remove the link, or point input.uri at a tree without one"
            )
            raise StorageError(msg)
    return True


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status of the botocore error behind ``exc`` (s3fs wraps them)."""
    for err in error_chain(exc, through_retries=True):
        response = getattr(err, "response", None)
        if isinstance(response, dict):
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
    return None


def _error_code(exc: BaseException) -> str | None:
    """The S3 error code behind ``exc``, e.g. ``PreconditionFailed``."""
    for err in error_chain(exc, through_retries=True):
        response = getattr(err, "response", None)
        if isinstance(response, dict):
            code = (response.get("Error") or {}).get("Code")
            if code:
                return str(code)
    return None


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_no_conditional_writes(loc: Location) -> None:
    with _warned_lock:
        if loc.uri in _warned:
            return
        _warned.add(loc.uri)
    log.warning(
        "%s: the store does not support conditional PUT (If-None-Match); falling back to "
        "HEAD-then-PUT, which two simultaneous writers can both win (see docs/storage.md)",
        loc.uri,
    )


def _s3_filesystem_class() -> type:
    """s3fs's filesystem with its own retry loop off: ``shardwise.store.backoff`` owns retries."""
    global _S3FS_CLASS  # noqa: PLW0603 - built once, import of s3fs is lazy
    if _S3FS_CLASS is None:
        from s3fs import S3FileSystem  # noqa: PLC0415 - ~0.3 s, S3 only

        class ShardwiseS3FileSystem(S3FileSystem):
            """S3FileSystem that tries each request once; the caller decides on retries."""

            retries = 1

        _S3FS_CLASS = ShardwiseS3FileSystem
    return _S3FS_CLASS


_S3FS_CLASS: type | None = None


def _remote_filesystem(uri: str, options: StorageOptions) -> tuple[Any, str]:
    """An fsspec filesystem for ``uri`` with the configured, non-secret options."""
    import fsspec  # noqa: PLC0415 - remote roots only

    protocol = uri.split("://", 1)[0].lower()
    if protocol not in _S3_PROTOCOLS:
        fs, path = fsspec.core.url_to_fs(uri)
        return fs, path
    client_kwargs: dict[str, Any] = {}
    if options.region:
        client_kwargs["region_name"] = options.region
    config_kwargs: dict[str, Any] = {
        "connect_timeout": options.connect_timeout,
        "read_timeout": options.read_timeout,
        # One try per botocore call: store/backoff.py retries, with jitter and a bound.
        "retries": {"total_max_attempts": 1, "mode": "standard"},
    }
    if options.addressing_style != "auto":
        config_kwargs["s3"] = {"addressing_style": options.addressing_style}
    kwargs: dict[str, Any] = {
        "anon": options.anon,
        "endpoint_url": options.endpoint_url,
        "client_kwargs": client_kwargs,
        "config_kwargs": config_kwargs,
        "use_listings_cache": False,
        "default_block_size": DEFAULT_BLOCK_SIZE,
    }
    if options.profile:
        kwargs["profile"] = options.profile
    cls = _s3_filesystem_class()
    fs = cls(**kwargs)
    return fs, cls._strip_protocol(uri)
