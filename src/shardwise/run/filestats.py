"""``<rel>.stats.json``: what labelling one source file took and found, as one record.

:class:`FileStats` is the only builder and reader of the file, and the coverage report's
bulk read of thousands of them (:func:`stats_from_json`) is here too. Every field may be
absent (older versions); one of the wrong type refuses the file, naming the field.
``FIGURES`` are what the shard marker and the journal keep of each file.
"""

import contextlib
import dataclasses
import os
import platform
import socket
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from shardwise.errors import RecordError
from shardwise.run import modelpin, throughput
from shardwise.run.labelcounts import compact_json
from shardwise.run.reader import QUALITY_COUNTS, arrow_owned
from shardwise.run.record import Fields, load_object
from shardwise.run.throughput import StatsTable, stats_table
from shardwise.store.atomic import json_bytes

SUFFIX = ".stats.json"
#: Packages whose versions go into every stats file (reproducibility).
VERSIONED = ("shardwise", "torch", "transformers", "tokenizers", "pyarrow")
#: What each file's throughput and data-quality figures are (shard marker, journal).
FIGURES = ("docs", "tokens", "seconds", "bytes", "device_name", "finished_at", "counts",
           "truncated_docs", "fidelity")  # fmt: skip
TOKENS_COUNTED = "real (unpadded) tokens of each classifier's input, summed over classifiers; "
TOKENS_COUNTED += "tokens_per_s: per second of the file's whole time (read to write); "
TOKENS_COUNTED += "engine.infer_tokens_per_s: per second of inference alone"


@dataclass(frozen=True)
class FileStats:
    """The content of one ``<rel>.stats.json`` (keys in docs/ARCHITECTURE.md, which a test
    holds against these fields). ``tokens_per_s``: unpadded classifier tokens per second of
    the file's whole time (what the walltime and the ETA use); ``engine``: the engine's own
    figures (docs/engine.md), recorded as they are, never decided on."""

    file: str | None = None
    task_id: str | None = None
    shard: int | None = None
    bytes: int | None = None
    docs: int | None = None
    tokens: int | None = None
    seconds: float | None = None
    docs_per_s: float | None = None
    tokens_per_s: float | None = None
    tokens_counted: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] | None = None  # the reader's data-quality counts
    truncated_docs: int | None = None
    #: Per classifier: docs labelled from fp32, the expected number of the others that
    #: differ from fp32 and its 95% bound (classify/recheck.py ``fidelity()``).
    fidelity: tuple[dict[str, Any], ...] | None = None
    models: dict[str, Any] = field(default_factory=dict)
    device: str | None = None
    device_name: str | None = None
    dtype: str | None = None
    hostname: str | None = None
    platform: str | None = None
    slurm_job_id: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    finished_at: str | None = None
    source_identity: str | None = None  # the source's identity when it was planned
    labelling: dict[str, Any] | None = None  # as run.json pins it
    precision: dict[str, Any] | None = None  # dtype and re-check margin in force
    engine: dict[str, Any] = field(default_factory=dict)
    label_counts: dict[str, Any] | None = None  # run/labelcounts.py

    @classmethod
    def of_labelled(
        cls, *, rel: str, task_id: str, shard: int, size: int, docs: int,
        timings: Mapping[str, float], engine: Mapping[str, Any], device: str, device_name: str,
        dtype: str, counts: Mapping[str, int], models: Mapping[str, Any], identity: str | None,
        labelling: Mapping[str, Any], label_counts: Mapping[str, Any],
    ) -> Self:  # fmt: skip
        """The stats of a file just labelled (``timings`` so far; see :meth:`with_write`)."""
        return cls(
            file=rel, task_id=task_id, shard=shard, bytes=size, docs=docs,
            tokens=int(engine.get("tokens", 0)), tokens_counted=TOKENS_COUNTED, counts=dict(counts),
            truncated_docs=int(engine.get("truncated_docs", 0)),
            fidelity=tuple(engine.get("fidelity", ())), models=dict(models), device=device,
            device_name=device_name, dtype=dtype, hostname=socket.gethostname(),
            platform=platform.platform(), slurm_job_id=os.environ.get("SLURM_JOB_ID"),
            versions=versions(), source_identity=identity, labelling=dict(labelling),
            precision={"dtype": dtype, "recheck_margin": engine.get("recheck_margin")},
            engine=dict(engine), label_counts=dict(label_counts),
        ).with_timings(timings)  # fmt: skip

    def with_timings(self, timings: Mapping[str, float]) -> Self:
        """These stats with ``timings`` and the rates and time they imply, stamped now."""
        seconds = sum(timings.values())
        tokens, docs = self.tokens or 0, self.docs or 0
        return dataclasses.replace(
            self, timings={k: round(v, 4) for k, v in timings.items()}, seconds=round(seconds, 4),
            docs_per_s=round(docs / seconds, 3) if seconds > 0 else None,
            tokens_per_s=round(tokens / seconds, 1) if seconds > 0 else None,
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )  # fmt: skip

    def with_write(self, write_s: float) -> Self:
        """These stats with the time the outputs before them took to write."""
        return self.with_timings({**self.timings, "write": write_s})

    def figures(self) -> dict[str, Any]:
        """What the shard marker and the journal keep of this file (``FIGURES``)."""
        out = {name: getattr(self, name) for name in FIGURES}
        out["fidelity"] = None if self.fidelity is None else list(self.fidelity)
        return out

    def to_json(self) -> bytes:
        """The file's bytes: indented, except ``label_counts``, on one compact line."""
        data = dataclasses.asdict(self)
        data["fidelity"] = None if self.fidelity is None else list(self.fidelity)
        if data["label_counts"] is None:
            del data["label_counts"]
        return stats_bytes(data)

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Parse a stats file; RecordError naming the file and the field when it is not one."""
        f = Fields.parse(raw, where)
        stats = f.into(cls)
        if not all(isinstance(entry, dict) for entry in stats.fidelity or ()):
            raise f.refuse("fidelity", "must be an array of objects")
        for key in QUALITY_COUNTS:
            Fields(stats.counts or {}, f"{where} [counts]").count(key, None)
        return stats

    def problems(
        self, rel: str, rows: int | None, pinned: Mapping[str, Any] | None,
        models: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[str]:  # fmt: skip
        """How these stats disagree with their file, its input's ``rows``, the labelling
        run.json pins (files labelled before stats recorded it: not compared) and its
        pinned models (``models``: a file labelled with another one is named)."""
        found = []
        for name, diffs in modelpin.mismatched(models or {}, self.models).items():
            found.append(f"labelled with another {name!r} model than run.json pins "
                         f"({modelpin.describe(diffs)})")  # fmt: skip
        if self.file != rel:
            found.append(f"file is {self.file!r}, expected {rel!r}")
        if rows is not None and self.docs != rows:
            found.append(f"docs is {self.docs!r}, the input has {rows}")
        if self.labelling is not None and pinned is not None:
            found += [
                f"labelled with {key}={self.labelling.get(key)!r}, run.json pins "
                f"{pinned.get(key)!r} (another set-up wrote into this output)"
                for key in sorted({*self.labelling, *pinned})
                if self.labelling.get(key) != pinned.get(key)
            ]
        return found

    def quality(self) -> dict[str, int]:
        """The non-zero data-quality counts (what coverage and verify add up)."""
        counts = self.counts or {}
        found = {k: counts[k] for k in QUALITY_COUNTS if isinstance(counts.get(k), int)}
        if self.truncated_docs:
            found["truncated_docs"] = self.truncated_docs
        return {k: v for k, v in found.items() if v}


def versions() -> dict[str, str]:
    """Installed versions of the packages that decide the labels."""
    out = dict.fromkeys(VERSIONED, "not installed")
    for name in VERSIONED:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def stats_bytes(stats: Mapping[str, Any]) -> bytes:
    """Serialise stats: indented, except ``label_counts`` (hundreds of cells: indented,
    most of the file), on one compact line."""
    counts = stats.get("label_counts")
    if counts is None:
        return json_bytes(stats)
    head = json_bytes({k: v for k, v in stats.items() if k != "label_counts"}).decode("utf-8")
    body = head.rstrip().removesuffix("}").rstrip()
    sep = "," if body != "{" else ""
    return f'{body}{sep}\n  "label_counts": {compact_json(counts)}\n}}\n'.encode()


#: The stats fields rates need, as Arrow types for the bulk JSON parser.
_F64, _STR = pa.float64(), pa.string()
_FIDELITY = pa.struct(
    [("classifier", _STR), ("docs", _F64), ("fp32_docs", _F64), ("mode", _STR),
     ("residual", _F64), ("residual_upper", _F64), ("margin_too_small", pa.bool_()),
     ("on_cpu", pa.bool_())]
)  # fmt: skip
_ARROW_SCHEMA = pa.schema(
    [("file", _STR), ("shard", _F64), ("device_name", _STR), ("docs", _F64), ("tokens", _F64),
     ("seconds", _F64), ("bytes", _F64), ("finished_at", _STR),
     ("counts", pa.struct([(k, _F64) for k in QUALITY_COUNTS])), ("truncated_docs", _F64),
     ("fidelity", pa.list_(_FIDELITY))]
)  # fmt: skip


def stats_from_json(blobs: Iterable[bytes]) -> StatsTable:
    """The figures of many ``.stats.json`` contents at once, by Arrow's JSON reader (~3x
    a record per file, most of the coverage report's time on a 50k-file run); anything
    Arrow refuses falls back to each file, a figure of the wrong type then NaN."""
    docs = [b for b in blobs if b.strip()]
    if not docs:
        return stats_table(())
    blob = b"\n".join(b.replace(b"\r", b" ").replace(b"\n", b" ") for b in docs)
    read = pa_json.ReadOptions(use_threads=True, block_size=1 << 24)
    parse = pa_json.ParseOptions(explicit_schema=_ARROW_SCHEMA, unexpected_field_behavior="ignore")
    try:
        table = pa_json.read_json(pa.BufferReader(arrow_owned(blob)), read, parse)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return stats_table(_each(docs))
    if table.num_rows != len(docs):
        return stats_table(_each(docs))

    def floats(name: str) -> np.ndarray:
        return table[name].to_numpy().astype(np.float64)  # nulls -> NaN

    shard = floats("shard")
    devices = table["device_name"].fill_null(throughput.UNKNOWN_DEVICE).to_pylist()
    return throughput.latest_per_file(
        StatsTable(
            file=np.array(table["file"].fill_null("").to_pylist(), dtype=object),
            shard=np.where(np.isfinite(shard), shard, -1).astype(np.int64),
            device_name=np.array(devices, dtype=object),
            docs=floats("docs"), tokens=floats("tokens"), seconds=floats("seconds"),
            bytes=floats("bytes"), finished_at=_epoch_seconds(table["finished_at"]),
            quality=_quality_columns(table),
            fidelity=throughput.objects([v or [] for v in table["fidelity"].to_pylist()]),
        )
    )  # fmt: skip


def _quality_columns(table: pa.Table) -> np.ndarray:
    """The data-quality counts of bulk-parsed stats as a (files x QUALITY) matrix."""
    counts = table["counts"].combine_chunks()
    columns = [
        pc.struct_field(counts, k).to_numpy(zero_copy_only=False).astype(np.float64)
        for k in QUALITY_COUNTS
    ]
    columns.append(table["truncated_docs"].to_numpy().astype(np.float64))
    return np.column_stack(columns) if columns else np.zeros((table.num_rows, 0))


def _each(docs: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """Each document that is a JSON object, for the lenient per-file path: a figure of the
    wrong type there is NaN (one malformed file must not hide the report)."""
    for doc in docs:
        try:
            yield load_object(doc, "stats")
        except RecordError:
            continue


def _epoch_seconds(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """ISO 8601 strings -> POSIX seconds, vectorised; per value only if Arrow refuses."""
    try:
        stamps = pc.cast(values, pa.timestamp("us", tz="UTC"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return np.array([throughput.parse_time(v) for v in values.to_pylist()], dtype=np.float64)
    micros = pc.cast(stamps, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64)
    return micros / 1e6
