"""Errors raised by shardwise.

Callers catch one base; the CLI turns it into one line and exit 1.

    ShardwiseError
    ├── ConfigError        a config key, type or value is wrong (names the key and the value)
    ├── RunMismatchError   run.json disagrees with this run (names each field, old and new)
    ├── InputError         a source file cannot be listed or read (names the file and the reason)
    │   └── FieldMissingError  a configured field is in no row of a file (a config mistake)
    ├── StorageError       a read or write on local disk or object storage failed (names the key)
    │   └── RetriesExhaustedError  a transient error outlived the retry bound (store.backoff)
    ├── ModelError         a classifier cannot be loaded or run (names the model)
    │   └── DeviceError    the device failed mid-run (CUDA error: names the device and host)
    ├── ShardFailedError   a shard finished with failed files (lists them; the shard is retried)
    ├── ShardClaimedError  a live job already works on this shard (names it; nothing touched)
    ├── RecordError        a file the run wrote is not in its format (names the file and field)
    └── DomainsError       the domain distribution cannot be computed yet (nothing labelled)
"""


class ShardwiseError(Exception):
    """Base of every error shardwise raises on purpose."""


class ConfigError(ShardwiseError):
    """A configuration value is missing, of the wrong type, or out of range."""


class RunMismatchError(ShardwiseError):
    """This run's settings disagree with the pinned run.json."""


class InputError(ShardwiseError):
    """A source file or the input listing is unusable."""


class FieldMissingError(InputError):
    """A configured field (``input.text_field``, ...) is in no row of a file: usually a
    typo every file shares, so it carries what a caller needs to say it once for many."""

    def __init__(
        self, message: str, *, config_key: str, path: str, found: tuple[str, ...], advice: str
    ) -> None:
        super().__init__(message)
        self.config_key = config_key
        self.path = path
        self.found = found
        self.advice = advice


class StorageError(ShardwiseError):
    """Reading or writing a file or object failed after retries."""


class ModelError(ShardwiseError):
    """A classifier could not be loaded or run."""


class DeviceError(ModelError):
    """The device failed while running the classifiers (e.g. a CUDA error); names GPU and host."""


class ShardFailedError(ShardwiseError):
    """Some files of a shard failed; the others are done and the shard will be retried."""


class ShardClaimedError(ShardwiseError):
    """Another live job holds this shard's claim; this job stops without touching outputs."""


class RecordError(ShardwiseError, ValueError):
    """A file of the run is not what its format says (``where``: the file; ``reason``: the
    field, its value). Also a ValueError: callers that treat a damaged file as absent catch
    it as one."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


class DomainsError(ShardwiseError):
    """The domain distribution cannot be computed (nothing done yet, unknown view)."""
