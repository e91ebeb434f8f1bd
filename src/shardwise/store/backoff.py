"""Bounded exponential backoff with full jitter for transient storage errors.

A retry is the difference between a job that survives a blip (5xx, ``SlowDown``, a reset
connection) and one that fails a whole shard; a bound keeps a dead endpoint visible: the
caller then gets a ``RetriesExhaustedError`` naming the key and the last error. Exactly
one layer retries (botocore's and s3fs's loops are off, ``store/location.py``), so a test
can count the attempts at the server. Full jitter spreads jobs hitting one throttled bucket.
"""

import errno
import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.client import IncompleteRead, RemoteDisconnected
from typing import Self, TypeVar

from shardwise.config import StorageOptions
from shardwise.errors import StorageError

T = TypeVar("T")

log = logging.getLogger("shardwise.store.location")

#: S3 error codes that mean "try again later", whatever the HTTP status says. S3 answers
#: 409 ConditionalRequestConflict while another conditional write to the key is in
#: flight: the documented reaction is to retry (then 412 or 200 settles it).
TRANSIENT_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled",
     "RequestLimitExceeded", "TooManyRequests", "TooManyRequestsException", "RequestTimeout",
     "RequestTimeoutException", "InternalError", "ServiceUnavailable", "ServerBusy",
     "BadGateway", "GatewayTimeout", "ConditionalRequestConflict", "OperationAborted"}
)  # fmt: skip
#: HTTP statuses worth a retry (besides every 5xx other than 501 Not Implemented).
TRANSIENT_STATUSES = frozenset({408, 429})
#: errno values of connection-level failures.
TRANSIENT_ERRNOS = frozenset(
    {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT,
     errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN}
)  # fmt: skip


class RetriesExhaustedError(StorageError):
    """A transient error outlived the retry bound; names the key and the last error."""

    def __init__(self, key: str, attempts: int, last_error: BaseException) -> None:
        self.key, self.attempts, self.last_error = key, attempts, last_error
        super().__init__(
            f"{key}: gave up after {attempts} attempt(s); last error: {describe(last_error)}"
        )


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry one storage operation."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 20.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("delays must be >= 0")

    @classmethod
    def of(cls, options: StorageOptions) -> Self:
        """The configured bound and backoff (``storage.max_attempts``, ``backoff_*``)."""
        return cls(options.max_attempts, options.backoff_base, options.backoff_max)

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The sleeps between attempts: ``attempts - 1`` full-jitter values."""
        rng = rng or random.Random()  # jitter, not cryptography
        for n in range(self.attempts - 1):
            yield rng.uniform(0.0, min(self.max_delay, self.base_delay * (2**n)))


def error_chain(exc: BaseException, *, through_retries: bool = False) -> Iterator[BaseException]:
    """``exc`` and its causes (s3fs wraps botocore errors in OSError); ``through_retries``
    also steps from a ``RetriesExhaustedError`` to its last error (to read the S3 code
    behind a give-up), never for deciding whether to retry."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        if through_retries and isinstance(cur, RetriesExhaustedError):
            cur = cur.last_error
        else:
            cur = cur.__cause__ or cur.__context__


def s3_reply(exc: BaseException, *, through_retries: bool = False) -> tuple[str, int | None]:
    """(S3 error code, HTTP status) of the first botocore error response behind ``exc``;
    ("", None) when there is none."""
    for err in error_chain(exc, through_retries=through_retries):
        reply = _reply(err)
        if reply is not None:
            return reply
    return "", None


def _reply(err: BaseException) -> tuple[str, int | None] | None:
    """(code, status) of one botocore ``ClientError``; None for any other error."""
    response = getattr(err, "response", None)
    if not isinstance(response, dict):
        return None
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    code = str((response.get("Error") or {}).get("Code") or "")
    return code, status if isinstance(status, int) else None


#: botocore's errors for "no credentials anywhere in its chain" (matched by name: the
#: store layer never imports botocore).
_NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"}


def no_credentials(exc: BaseException) -> bool:
    """Whether botocore found no (or incomplete) credentials behind ``exc``."""
    return any(type(err).__name__ in _NO_CREDENTIALS for err in error_chain(exc))


def no_credentials_message(key: str) -> str:
    """One line naming the URL and where credentials go (a traceback says neither)."""
    text = f"{key}: no S3 credentials found. Put them in the environment "
    text += "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) or in ~/.aws/credentials (a named "
    text += "profile: storage.profile in the config); storage.anon: true reads a public "
    return text + "bucket without any. Credentials never go in the config or the URL."


def describe(exc: BaseException) -> str:
    """``Type: message`` plus the S3 error code and HTTP status hidden in its causes (s3fs
    turns a ``ClientError`` into a bare OSError; the code is what tells a person why)."""
    text = f"{type(exc).__name__}: {str(exc) or repr(exc)}"
    code, status = s3_reply(exc)
    extra = ", ".join(str(x) for x in (code, status and f"HTTP {status}") if x)
    return f"{text} ({extra})" if extra and extra not in text else text


def _connection_error_types() -> tuple[type[BaseException], ...]:
    """Connection/timeout exception types of the HTTP stacks fsspec may use (built on the
    first check: a run on local disk never pays ~0.2 s for aiohttp and botocore)."""
    import aiohttp  # noqa: PLC0415 - ~0.15 s, object stores only
    import botocore.exceptions as boto  # noqa: PLC0415 - object stores only
    import fsspec.exceptions  # noqa: PLC0415 - object stores only

    return (
        ConnectionError,
        TimeoutError,
        boto.ConnectionError,
        boto.HTTPClientError,
        boto.IncompleteReadError,
        boto.ResponseStreamingError,
        aiohttp.ClientConnectionError,
        aiohttp.ClientPayloadError,
        fsspec.exceptions.FSTimeoutError,
        IncompleteRead,
        RemoteDisconnected,
    )


_CONNECTION_ERRORS: tuple[type[BaseException], ...] | None = None


def is_transient(exc: BaseException) -> bool:
    """True for errors a retry can fix: 5xx, throttling, resets, timeouts. Missing objects,
    denied access, failed preconditions and bad requests are final: a retry only delays
    the real message."""
    global _CONNECTION_ERRORS  # noqa: PLW0603 - computed once, imports are lazy
    if _CONNECTION_ERRORS is None:
        _CONNECTION_ERRORS = _connection_error_types()
    for err in error_chain(exc):
        if isinstance(err, FileNotFoundError | PermissionError | FileExistsError):
            return False
        reply = _reply(err)
        if reply is not None:
            code, status = reply
            if code in TRANSIENT_CODES:
                return True
            return status is not None and (
                status in TRANSIENT_STATUSES or (status >= 500 and status != 501)
            )
        if isinstance(err, _CONNECTION_ERRORS):
            return True
        if isinstance(err, OSError) and err.errno in TRANSIENT_ERRNOS:
            return True
    return False


def call(
    fn: Callable[[], T],
    *,
    key: str,
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
    transient: Callable[[BaseException], bool] = is_transient,
) -> T:
    """Run ``fn`` until it succeeds, a final error occurs (raised unchanged, so callers
    still tell ``FileNotFoundError`` from the rest), or the attempts are spent
    (``RetriesExhaustedError`` naming ``key``)."""
    delays, attempt = policy.delays(), 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            if no_credentials(exc):
                raise StorageError(no_credentials_message(key)) from None
            if not transient(exc):
                raise
            delay = next(delays, None)
            if delay is None:
                raise RetriesExhaustedError(key, attempt, exc) from exc
            log.warning(
                "%s: transient error (attempt %d/%d), retrying in %.2fs: %s",
                key,
                attempt,
                policy.attempts,
                delay,
                describe(exc),
            )
            sleep(delay)
