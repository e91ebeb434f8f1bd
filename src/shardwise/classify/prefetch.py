"""The shard job's reader thread: each file read and tokenized (and its tokens counted in
the training tokenizer) one file ahead of the engine, so the GPU never waits on the input.
A file that cannot be read is handed on with its error (the shard goes on without it); a
store that stays down after its retries stops the reading (every later file would wait
out the same retries)."""

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.classify.tokencount import TokenCounter
from shardwise.errors import InputError, StorageError
from shardwise.run.fields import Documents
from shardwise.run.opened import OpenRun
from shardwise.run.reader import read_documents


@dataclass(frozen=True)
class FileTask:
    """One source file of the shard."""

    rel: str
    size: int
    task_id: str
    identity: str | None = None  # the source's identity when it was planned


@dataclass(kw_only=True)
class Loaded:
    """One file read (and tokenized) ahead of the engine, or why it could not be."""

    task: FileTask
    docs: Documents | None = None
    prepared: Any = None
    error: str | None = None
    exc: BaseException | None = None
    fatal: bool = False
    read_s: float = 0.0
    tokenize_s: float = 0.0
    tokens: np.ndarray | None = None  # each document's tokens (``domains.tokenizer``)
    count_s: float = 0.0


def prefetch(
    ctx: OpenRun,
    todo: list[FileTask],
    prepare: Callable[[list[str], list[str]], Any],
    counter: TokenCounter | None = None,
) -> Iterator[Loaded]:
    """Read + tokenize files (and count their tokens in the training tokenizer) on a
    background thread, one file ahead of the consumer."""
    q: queue.Queue[Loaded | None] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item: Loaded | None) -> None:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def work() -> None:
        try:
            for task in todo:
                if stop.is_set():
                    return
                item = Loaded(task=task)
                t0 = time.perf_counter()
                try:
                    item.docs = read_documents(ctx.source, task.rel, ctx.fields, ctx.fmt)
                    item.read_s = time.perf_counter() - t0
                    t1 = time.perf_counter()
                    item.prepared = prepare(item.docs.texts, item.docs.urls)
                    item.tokenize_s = time.perf_counter() - t1
                    if counter is not None:
                        t2 = time.perf_counter()
                        item.tokens = counter.count(item.docs.texts)
                        item.count_s = time.perf_counter() - t2
                except InputError as e:
                    item.error, item.exc = str(e), e
                except StorageError as e:
                    # Retries are exhausted: the store is down, so every later file would
                    # wait out the same retries. Stop reading; the shard fails now.
                    item.error, item.exc, item.fatal = str(e), e, True
                except Exception as e:  # noqa: BLE001 - recorded per file; other files go on
                    item.error = f"{ctx.source.url(task.rel)}: {type(e).__name__}: {e}"
                    item.exc = e
                put(item)
                if item.fatal:
                    return
        finally:
            put(None)

    thread = threading.Thread(target=work, name="shardwise-reader", daemon=True)
    thread.start()
    try:
        while (item := q.get()) is not None:
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)
