"""Bounded exponential backoff with full jitter for transient storage errors.

Object stores fail transiently all the time: 5xx, ``SlowDown``/throttling, a reset
connection, a timeout. Retrying such a request a few times is the difference between
a job that survives a blip and one that fails a whole shard. Retrying forever would
hide a dead endpoint, so the number of attempts is bounded; once it is spent the
caller gets a ``RetriesExhaustedError`` (a ``StorageError``) that names the object
key and the last error, which is what a person needs to act on.

Exactly one layer retries. botocore's and s3fs's own retry loops are switched off
where ``store/location.py`` builds the filesystem, so a request is tried at most
``attempts`` times (and a test can count them at the server) instead of
botocore x s3fs x ours.

Delays use "full jitter" (``uniform(0, min(cap, base * 2**n))``): many shard jobs
hitting the same throttled bucket spread out instead of retrying in lockstep.
"""

from __future__ import annotations

import errno
import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.client import IncompleteRead, RemoteDisconnected
from typing import TypeVar

from shardwise.config import StorageOptions
from shardwise.errors import StorageError

T = TypeVar("T")

log = logging.getLogger("shardwise.store.location")

#: S3 error codes that mean "try again later", whatever the HTTP status says.
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "ServerBusy",
        "BadGateway",
        "GatewayTimeout",
        # S3 answers 409 when another conditional write to the same key is in flight;
        # the documented client reaction is to retry (then 412 or 200 settles it).
        "ConditionalRequestConflict",
        "OperationAborted",
    }
)

#: HTTP statuses worth a retry (besides every 5xx other than 501 Not Implemented).
TRANSIENT_STATUSES = frozenset({408, 429})

#: errno values of connection-level failures.
TRANSIENT_ERRNOS = frozenset(
    {
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
    }
)


class RetriesExhaustedError(StorageError):
    """A transient error outlived the retry bound; names the key and the last error."""

    def __init__(self, key: str, attempts: int, last_error: BaseException) -> None:
        self.key = key
        self.attempts = attempts
        self.last_error = last_error
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
            msg = f"attempts must be >= 1, got {self.attempts}"
            raise ValueError(msg)
        if self.base_delay < 0 or self.max_delay < 0:
            msg = "delays must be >= 0"
            raise ValueError(msg)

    @classmethod
    def of(cls, options: StorageOptions) -> RetryPolicy:
        """The configured bound and backoff (``storage.max_attempts``, ``backoff_*``)."""
        return cls(
            attempts=options.max_attempts,
            base_delay=options.backoff_base,
            max_delay=options.backoff_max,
        )

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The sleeps between attempts: ``attempts - 1`` full-jitter values."""
        rng = rng or random.Random()  # jitter, not cryptography
        for n in range(self.attempts - 1):
            yield rng.uniform(0.0, min(self.max_delay, self.base_delay * (2**n)))


def error_chain(exc: BaseException, *, through_retries: bool = False) -> Iterator[BaseException]:
    """``exc`` and its causes: s3fs wraps botocore errors in OSError with ``__cause__``.

    ``through_retries`` also steps from a ``RetriesExhaustedError`` to its last error
    (to read the S3 code behind a give-up); never for deciding whether to retry.
    """
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        if through_retries and isinstance(cur, RetriesExhaustedError):
            cur = cur.last_error
        else:
            cur = cur.__cause__ or cur.__context__


#: botocore's errors for "no credentials anywhere in its chain" (matched by name: the
#: store layer never imports botocore).
_NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"}


def no_credentials(exc: BaseException) -> bool:
    """Whether botocore found no (or incomplete) credentials behind ``exc``."""
    return any(type(err).__name__ in _NO_CREDENTIALS for err in error_chain(exc))


def no_credentials_message(key: str) -> str:
    """One line naming the URL and where credentials go (a traceback says neither)."""
    return (
        f"{key}: no S3 credentials found. Put them in the environment "
        "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) or in ~/.aws/credentials (a named "
        "profile: storage.profile in the config); storage.anon: true reads a public "
        "bucket without any. Credentials never go in the config or the URL."
    )


def describe(exc: BaseException) -> str:
    """``Type: message`` plus the S3 error code and HTTP status hidden in its causes.

    s3fs turns a botocore ``ClientError`` into a bare ``OSError``; the code
    (``SlowDown``, ``InternalError``) is what tells a person what happened.
    """
    text = f"{type(exc).__name__}: {str(exc) or repr(exc)}"
    for err in error_chain(exc):
        response = getattr(err, "response", None)
        if isinstance(response, dict):
            code = (response.get("Error") or {}).get("Code")
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            extra = ", ".join(str(x) for x in (code, status and f"HTTP {status}") if x)
            if extra and extra not in text:
                text += f" ({extra})"
            break
    return text


def _client_error_is_transient(exc: BaseException) -> bool | None:
    """Verdict for an HTTP error response (botocore ``ClientError``), None if not one."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    code = str((response.get("Error") or {}).get("Code") or "")
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    if code in TRANSIENT_CODES:
        return True
    if isinstance(status, int):
        return status in TRANSIENT_STATUSES or (status >= 500 and status != 501)
    return False


def _connection_error_types() -> tuple[type[BaseException], ...]:
    """Connection/timeout exception types of the HTTP stacks fsspec may use.

    Built on the first transient-error check: aiohttp and botocore take ~0.2 s to import,
    which a run on local disk never needs to pay.
    """
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
    """True for errors a retry can fix: 5xx, throttling, resets, timeouts.

    Missing objects, denied access, failed preconditions and bad requests are final:
    retrying them only delays the real error message.
    """
    global _CONNECTION_ERRORS  # noqa: PLW0603 - computed once, imports are lazy
    if _CONNECTION_ERRORS is None:
        _CONNECTION_ERRORS = _connection_error_types()
    for err in error_chain(exc):
        if isinstance(err, FileNotFoundError | PermissionError | FileExistsError):
            return False
        verdict = _client_error_is_transient(err)
        if verdict is not None:
            return verdict
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
    """Run ``fn`` until it succeeds, a final error occurs, or the attempts are spent.

    Final (non-transient) errors propagate unchanged so callers can still tell
    ``FileNotFoundError`` from the rest; exhausting the bound raises
    ``RetriesExhaustedError`` naming ``key``.
    """
    delays = policy.delays()
    attempt = 0
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
