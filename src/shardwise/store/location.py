"""One code path for local folders and object stores (``s3://``, any fsspec URL).

A root plus relative paths, so a corpus moves between a mount and a bucket unchanged. On
S3 the client is called where that saves requests (one paginated listing, whole-object
PUTs, ``create_if_absent`` as one conditional PUT); every request is retried by
``store.backoff`` alone. Credentials are never inputs here.
"""

import contextlib
import functools
import io
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Self, TypeVar

from shardwise.config import StorageOptions, reject_credentials_in_url
from shardwise.errors import StorageError
from shardwise.store.atomic import create_exclusive, write_atomic
from shardwise.store.backoff import RetryPolicy, call, describe, s3_reply

T = TypeVar("T")

log = logging.getLogger("shardwise.store.location")

#: Remote read-ahead: a JSONL stream costs one GET per 16 MiB, memory per open file stays
#: bounded (s3fs's default is 50 MiB).
DEFAULT_BLOCK_SIZE = 16 * 2**20
#: Parquet files up to this size are fetched whole: one round trip beats footer + chunks.
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

    def inner_prefix(self, other: Self) -> str | None:
        """Where ``other``'s root lies inside this root: ``""`` (the same root), ``"a/b/"``
        (below it) or None (elsewhere): input and output may nest, and the planner and
        ``verify`` must then tell the corpus from shardwise's own outputs."""
        base = self.root.rstrip("/") + "/"
        if self.protocol != other.protocol or not f"{other.root}/".startswith(base):
            return None
        return other.root[len(base) :] + "/" if other.root != self.root else ""

    def call_s3(self, rel: str, method: str, **kwargs: Any) -> Any:
        """One retried S3 request on the object of ``rel`` (the store layer's conditional
        writes, ``store/lease.py``); the raw botocore reply."""
        return self._s3(rel, method, **kwargs)

    def _s3(self, rel: str, method: str, **kwargs: Any) -> Any:
        """One retried S3 call on the object of ``rel``."""
        key = f"{self.prefix}/{rel}" if self.prefix else rel
        return self._retry(
            rel, lambda: self.fs.call_s3(method, Bucket=self.bucket, Key=key, **kwargs)
        )

    def _size(self, rel: str) -> int:
        """One HEAD for a remote file's size; FileNotFoundError if absent."""
        info = self._retry(rel, lambda: self.fs.info(self.path(rel)))
        size = int(info.get("size") or 0)
        self._sizes[rel] = size
        return size

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

    def list_files(self) -> list[tuple[str, int]]:
        """Every file below the root as (relative path, size), sorted; one listing."""
        return [(rel, size) for rel, size, _version in self.list_entries()]

    def list_entries(self) -> list[tuple[str, int, str]]:
        """Every file below the root as (relative path, size, version), sorted; one
        listing. ``version`` costs no extra request (mtime in ns locally, the ETag on S3,
        "" when none): a file changed in place gets another (size, version)."""
        try:
            if self.is_s3:
                out = list(self._list_s3())
            elif self.remote:
                out = list(self._list_fsspec())
            else:
                root = Path(self.root)
                if not root.is_dir():
                    return []
                out = [
                    (rel, (st := e.stat()).st_size, str(st.st_mtime_ns))
                    for rel, e in _walk_local(root)
                ]
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
            yield key[len(prefix) :], int(info.get("size") or 0), _version(info)

    def entry(self, rel: str) -> tuple[int, str]:
        """One file's (size, version), as :meth:`list_entries` gives it (one stat, one HEAD
        remotely): what a reader records of a file to tell later whether it changed.
        FileNotFoundError if it is absent."""
        try:
            if not self.remote:
                st = Path(self.path(rel)).stat()
                return st.st_size, str(st.st_mtime_ns)
            if self.is_s3:
                head = self._s3(rel, "head_object")
                return int(head.get("ContentLength") or 0), str(head.get("ETag") or "").strip('"')
            info = self._retry(rel, lambda: self.fs.info(self.path(rel)))
        except FileNotFoundError:
            raise
        except (OSError, ValueError, StorageError) as e:
            if s3_reply(e, through_retries=True)[1] == 404:
                raise FileNotFoundError(self.url(rel)) from e
            raise self._fail("check", rel, e) from e
        return int(info.get("size") or 0), _version(info)

    def list_names(self) -> list[str]:
        """Every file below the root (relative paths, sorted), without sizes: locally no
        stat per file, which is most of a listing's time on a network filesystem."""
        if self.remote:
            return [rel for rel, _ in self.list_files()]
        root = Path(self.root)
        if not root.is_dir():
            return []
        try:
            return sorted(rel for rel, _entry in _walk_local(root))
        except OSError as e:
            raise self._fail("list", "", e) from e

    def remember_sizes(self, sizes: Mapping[str, int]) -> None:
        """Record sizes known from the plan: ``open`` then needs no HEAD per remote file
        (not filled by ``list_files``: a listing can hold millions of files never opened)."""
        self._sizes.update(sizes)

    def open(self, rel: str, *, block_size: int | None = None) -> IO[bytes]:
        """Open ``rel`` for streaming reads (FileNotFoundError if absent). Remote Parquet
        has no read-ahead, so pyarrow fetches the footer and exactly the projected column
        chunks (a small file: one GET whole); other files get a ``block_size`` read-ahead.
        Every GET is retried on its own; a HEAD only when the size is unknown."""
        if not self.remote:
            with self._reading("open", rel):
                return Path(self.path(rel)).open("rb")
        size, cache_type = self._sizes.get(rel), "readahead"
        if rel.endswith(RANDOM_ACCESS_SUFFIXES):
            if size is None:  # s3fs would HEAD for it anyway; learn it first to choose
                with self._reading("open", rel):
                    size = self._size(rel)
            if size <= SMALL_FILE_BYTES:
                return io.BytesIO(self.read_bytes(rel))
            cache_type = "none"
        return self._open_remote(rel, size, block_size or DEFAULT_BLOCK_SIZE, cache_type)

    def _open_remote(
        self, rel: str, size: int | None, block_size: int, cache_type: str
    ) -> IO[bytes]:
        """An fsspec file with a read-ahead buffer whose every GET is retried."""
        path = self.path(rel)
        kwargs: dict[str, Any] = {"block_size": block_size, "cache_type": cache_type}
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
        """One probe (a HEAD remotely); prefer a listing for many files."""
        if not self.remote:
            return Path(self.path(rel)).exists()
        try:
            if self.is_s3:
                self._s3(rel, "head_object")
                return True
            return bool(self._retry(rel, lambda: self.fs.exists(self.path(rel))))
        except FileNotFoundError:
            return False
        except (OSError, ValueError, StorageError) as e:
            if s3_reply(e, through_retries=True)[1] == 404:
                return False
            raise self._fail("check", rel, e) from e

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
        On S3 one conditional PUT: of two racing writers exactly one gets True (a retried
        PUT whose first try landed says False: callers re-read and validate the content)."""
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
            self._s3(rel, "put_object", Body=data, IfNoneMatch="*")
        except (OSError, StorageError) as e:
            code, status = s3_reply(e, through_retries=True)
            if isinstance(e, FileExistsError) or status == 412:
                return False
            if status == 501 or code == "NotImplemented":
                _warn_no_conditional_writes(self.uri)
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
                self._s3(rel, "delete_object")
            elif self.exists(rel):
                self._retry(rel, lambda: self.fs.rm_file(self.path(rel)))
        except FileNotFoundError:
            return
        except (OSError, ValueError, StorageError) as e:
            raise self._fail("remove", rel, e) from e


class _RetryingFetcher:
    """Wraps a remote file's ranged-GET function so each GET is retried on its own."""

    def __init__(self, fetcher: Callable[[int, int], bytes], key: str, policy: RetryPolicy):
        self.fetcher, self.key, self.policy = fetcher, key, policy

    def __call__(self, start: int, end: int) -> bytes:
        key = f"{self.key} [{start}:{end}]"
        return call(lambda: self.fetcher(start, end), key=key, policy=self.policy)


def _version(info: Mapping[str, Any]) -> str:
    """An fsspec file's version as a listing and a stat both give it: its ETag, else its
    mtime ("" when neither)."""
    version = info.get("ETag") or info.get("etag") or info.get("mtime") or ""
    return str(version).strip('"')


def _walk_local(root: Path) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Recursive scandir: each file's relative path and entry (its type comes with the
    listing; a stat is the caller's choice)."""
    stack = [(str(root), "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as it:
            for entry in it:
                rel = f"{prefix}{entry.name}"
                if _is_dir(entry, root, rel):
                    stack.append((entry.path, rel + "/"))
                elif entry.is_file(follow_symlinks=True):
                    yield rel, entry


def _is_dir(entry: os.DirEntry[str], root: Path, rel: str) -> bool:
    """A directory to descend into; a link back to a folder above it (a loop) is refused,
    naming the link: otherwise the walk repeats the loop until the OS says ELOOP."""
    if not entry.is_dir(follow_symlinks=True):
        return False
    if entry.is_symlink():
        target = os.path.realpath(entry.path)
        here = os.path.realpath(Path(entry.path).parent)
        if here == target or here.startswith(target.rstrip("/") + "/"):
            msg = f"cannot list {root}: the symbolic link {rel} points to {target}, a folder "
            msg += "above it (a loop); remove the link, or point input.uri at a tree without one"
            raise StorageError(msg)
    return True


@functools.cache  # once per store
def _warn_no_conditional_writes(uri: str) -> None:
    msg = "%s: the store does not support conditional PUT (If-None-Match); falling back to "
    msg += "HEAD-then-PUT, which two simultaneous writers can both win (see docs/storage.md)"
    log.warning(msg, uri)


@functools.cache
def _s3_filesystem_class() -> type:
    """s3fs's filesystem with its own retry loop off: ``shardwise.store.backoff`` owns retries."""
    from s3fs import S3FileSystem  # noqa: PLC0415 - ~0.3 s, S3 only

    class ShardwiseS3FileSystem(S3FileSystem):
        retries = 1  # one try per request; the caller decides on retries

    return ShardwiseS3FileSystem


def _remote_filesystem(uri: str, options: StorageOptions) -> tuple[Any, str]:
    """An fsspec filesystem for ``uri`` with the configured, non-secret options."""
    import fsspec  # noqa: PLC0415 - remote roots only

    protocol = uri.split("://", 1)[0].lower()
    if protocol not in _S3_PROTOCOLS:
        return fsspec.core.url_to_fs(uri)
    client_kwargs = {"region_name": options.region} if options.region else {}
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
    return cls(**kwargs), cls._strip_protocol(uri)
