"""A shard job's progress: a bar on a terminal, plain lines in a log file."""

import sys
import time
from typing import Any

from tqdm import tqdm


class LogLines:
    """Progress as plain lines for a log file, where a bar's carriage returns are noise:
    one when a file is done, at most every ``interval`` seconds, and one at the end."""

    def __init__(self, total: int, shard: int, interval: float = 60.0) -> None:
        self.total, self.shard, self.interval = total, shard, interval
        self.done = 0
        self.started = self.said = time.monotonic()

    def update(self, n: int) -> None:
        """Count ``n`` more files; say so when the interval has passed."""
        self.done += n
        if time.monotonic() - self.said >= self.interval:
            self._say()

    def close(self) -> None:
        """The last line: how far the shard got."""
        self._say()

    def _say(self) -> None:
        self.said = time.monotonic()
        elapsed = self.said - self.started
        line = f"shard {self.shard}: {self.done}/{self.total} file(s) in {elapsed:.0f} s"
        print(line, file=sys.stderr, flush=True)


def progress_bar(total: int, shard: int, *, enabled: bool) -> Any:
    """A bar on a terminal, plain lines in a log file (the classify rule's ``2> log``)."""
    if enabled and not sys.stderr.isatty():
        return LogLines(total, shard)
    return tqdm(total=total, desc=f"shard {shard}", unit="file", mininterval=5, disable=not enabled)
