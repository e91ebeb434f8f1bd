"""``<rel>.stats.json``: what labelling one source file took and found, as one record.

:class:`FileStats` is the only builder and reader of the file. Every field may be absent
(older versions); one of the wrong type refuses the file, naming the field. A field
marked with :func:`figure` is one of the file's *figures*: the shard marker and the
progress journal keep it (``FIGURES``), the bulk reader reads it as a column
(``ARROW_SCHEMA``, ``run/statstable.py``), and with a ``total`` coverage sums it over the
labelled files: a new figure is its field here and the code that computes it.
"""

import contextlib
import dataclasses
import os
import platform
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from importlib import metadata
from typing import Any, Literal, Self

import pyarrow as pa

from shardwise.run import modelpin
from shardwise.run.enginefigures import EngineFigures
from shardwise.run.fidelity import ARROW as FIDELITY_ARROW
from shardwise.run.fidelity import FileFidelity
from shardwise.run.fields import QUALITY_COUNTS
from shardwise.run.labelcounts import LabelCounts, compact_json
from shardwise.run.labelling import Labelling
from shardwise.run.modelpin import ModelIdentity
from shardwise.run.record import Fields
from shardwise.store.atomic import json_bytes

SUFFIX = ".stats.json"
#: Packages whose versions go into every stats file (reproducibility).
VERSIONED = ("shardwise", "torch", "transformers", "tokenizers", "pyarrow")
#: ``device_name`` of a file whose stats name none (CPU runs, old stats).
UNKNOWN_DEVICE = "unknown"
TOKENS_COUNTED = "real (unpadded) tokens of each classifier's input, summed over classifiers; "
TOKENS_COUNTED += "tokens_per_s: per second of the file's whole time (read to write); "
TOKENS_COUNTED += "engine.infer_tokens_per_s: per second of inference alone"


@dataclass(frozen=True)
class Figure:
    """How one figure is read as a column (``run/statstable.py``): a ``number`` (float64,
    NaN when absent), an ``index`` (int64, -1), a ``name`` (``missing`` when absent), a
    ``time`` (ISO 8601, read as POSIX seconds), the data-quality ``counts`` or a list of
    ``entries`` (``arrow``: their type). ``total``: the coverage key of its sum over the
    labelled files."""

    column: Literal["number", "index", "name", "time", "counts", "entries"]
    total: str | None = None
    missing: str = ""
    arrow: pa.DataType | None = None
    digits: int = 0  # the total's decimals (0: a whole number)

    def arrow_type(self) -> pa.DataType:
        """The type the bulk reader reads it as."""
        if self.arrow is not None:
            return self.arrow
        if self.column == "counts":
            return pa.struct([(k, pa.float64()) for k in QUALITY_COUNTS])
        return pa.string() if self.column in ("name", "time") else pa.float64()


def figure(
    column: str,
    *,
    total: str | None = None,
    missing: str = "",
    arrow: pa.DataType | None = None,
    digits: int = 0,
) -> Any:
    """A :class:`FileStats` field that is a figure (module docstring), absent by default."""
    how = Figure(column, total, missing, arrow, digits)  # type: ignore[arg-type]
    return field(default=None, metadata={"figure": how})


@dataclass(frozen=True)
class Precision:
    """The dtype a file was labelled in and the fp32 re-check margin in force (a number,
    ``auto`` before calibration measured it, None where nothing was re-checked)."""

    dtype: str | None = None
    recheck_margin: float | str | None = None


@dataclass(frozen=True, kw_only=True)
class FileStats:
    """The content of one ``<rel>.stats.json`` (keys in docs/ARCHITECTURE.md, which a test
    holds against these fields). ``tokens_per_s``: unpadded classifier tokens per second of
    the file's whole time (what the walltime and the ETA use); ``engine``: the engine's own
    figures (docs/engine.md), recorded as they are, never decided on."""

    file: str | None = None
    task_id: str | None = None
    shard: int | None = None
    bytes: int | None = figure("number")
    docs: int | None = figure("number")
    tokens: int | None = figure("number", total="tokens_done")
    seconds: float | None = figure("number")
    #: The engine's seconds (``engine.infer_s``) and the fp32 re-check's part of them
    #: (``engine.recheck_s``): coverage's share of engine time spent re-checking.
    infer_s: float | None = figure("number", total="engine_seconds", digits=3)
    recheck_s: float | None = figure("number", total="recheck_seconds", digits=3)
    #: Seconds from the job's start to its engine being ready (the job step's start,
    #: the models' load and checks, a compile), on the first file a job labelled only:
    #: the walltime fit's floor counts it (``run/throughput.py`` ``FileNeed``).
    startup_s: float | None = figure("number")
    docs_per_s: float | None = None
    tokens_per_s: float | None = None
    tokens_counted: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] | None = figure("counts")  # the reader's data-quality counts
    truncated_docs: int | None = figure("number")
    #: Per classifier: docs labelled from fp32, the expected number of the others that
    #: differ from fp32 and its 95% bound (classify/recheck.py ``fidelity()``).
    fidelity: tuple[FileFidelity, ...] | None = figure("entries", arrow=pa.list_(FIDELITY_ARROW))
    models: dict[str, ModelIdentity] = field(default_factory=dict)
    device: str | None = None
    device_name: str | None = figure("name", missing=UNKNOWN_DEVICE)
    dtype: str | None = None
    hostname: str | None = None
    platform: str | None = None
    slurm_job_id: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    finished_at: str | None = figure("time")
    source_identity: str | None = None  # the source's identity when it was planned
    #: A campaign's site and lease epoch that wrote these stats (``verify`` holds them to
    #: the marker's and the sidecar's: one holder's outputs, never a mix).
    site: str | None = None
    lease_epoch: int | None = None
    labelling: Labelling | None = None  # as run.json pins it
    precision: Precision | None = None
    engine: EngineFigures = field(default_factory=EngineFigures)
    label_counts: LabelCounts | None = None

    @classmethod
    def of_labelled(  # noqa: PLR0913 - one keyword per figure the job measured
        cls,
        *,
        rel: str,
        task_id: str,
        shard: int,
        size: int,
        docs: int,
        timings: Mapping[str, float],
        engine: Mapping[str, Any],
        device: str,
        device_name: str,
        dtype: str,
        counts: Mapping[str, int],
        models: Mapping[str, ModelIdentity],
        identity: str | None,
        labelling: Labelling,
        label_counts: LabelCounts,
    ) -> Self:
        """The stats of a file just labelled (``timings`` so far; see :meth:`with_write`)."""
        figures = EngineFigures.from_json(dict(engine), "the engine's figures")
        return cls(
            file=rel,
            task_id=task_id,
            shard=shard,
            bytes=size,
            docs=docs,
            tokens=figures.tokens or 0,
            tokens_counted=TOKENS_COUNTED,
            counts=dict(counts),
            truncated_docs=figures.truncated_docs or 0,
            infer_s=figures.infer_s,
            recheck_s=figures.recheck_s,
            fidelity=figures.fidelity,
            models=dict(models),
            device=device,
            device_name=device_name,
            dtype=dtype,
            hostname=socket.gethostname(),
            platform=platform.platform(),
            slurm_job_id=os.environ.get("SLURM_JOB_ID"),
            versions=versions(),
            source_identity=identity,
            labelling=labelling,
            precision=Precision(dtype, figures.recheck_margin),
            engine=figures,
            label_counts=label_counts,
        ).with_timings(timings)

    def with_timings(self, timings: Mapping[str, float]) -> Self:
        """These stats with ``timings`` and the rates and time they imply, stamped now."""
        seconds = sum(timings.values())
        tokens, docs = self.tokens or 0, self.docs or 0
        return dataclasses.replace(
            self,
            timings={k: round(v, 4) for k, v in timings.items()},
            seconds=round(seconds, 4),
            docs_per_s=round(docs / seconds, 3) if seconds > 0 else None,
            tokens_per_s=round(tokens / seconds, 1) if seconds > 0 else None,
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )

    def with_write(self, write_s: float) -> Self:
        """These stats with the time the outputs before them took to write."""
        return self.with_timings({**self.timings, "write": write_s})

    def figures(self) -> dict[str, Any]:
        """What the shard marker and the journal keep of this file (``FIGURES``)."""
        out = {name: getattr(self, name) for name in FIGURES}
        out["fidelity"] = None if self.fidelity is None else [e.to_json() for e in self.fidelity]
        return out

    def to_json(self) -> bytes:
        """The file's bytes: indented, except ``label_counts``, on one compact line."""
        data = dataclasses.asdict(self)
        data["fidelity"] = None if self.fidelity is None else [e.to_json() for e in self.fidelity]
        data["labelling"] = None if self.labelling is None else self.labelling.to_json()
        data["models"] = {name: identity.to_json() for name, identity in self.models.items()}
        if self.label_counts is None:
            del data["label_counts"]
        else:
            data["label_counts"] = self.label_counts.to_json()
        return stats_bytes(data)

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Self:
        """Parse a stats file; RecordError naming the file and the field when it is not one."""
        f = Fields.parse(raw, where)
        stats = f.into(cls)
        for key in QUALITY_COUNTS:
            Fields(stats.counts or {}, f"{where} [counts]").count(key, None)
        return stats

    def problems(
        self,
        rel: str,
        rows: int | None,
        pinned: Labelling | None,
        models: Mapping[str, ModelIdentity] | None = None,
    ) -> list[str]:
        """How these stats disagree with their file, its input's ``rows``, the labelling
        run.json pins (files labelled before stats recorded it: not compared) and its
        pinned models (``models``: a file labelled with another one is named)."""
        found = []
        for name, diffs in modelpin.mismatched(models or {}, self.models).items():
            found.append(
                f"labelled with another {name!r} model than run.json pins "
                f"({modelpin.describe(diffs)})"
            )
        if self.file != rel:
            found.append(f"file is {self.file!r}, expected {rel!r}")
        if rows is not None and self.docs != rows:
            found.append(f"docs is {self.docs!r}, the input has {rows}")
        if self.labelling is not None and pinned is not None:
            found += [
                f"labelled with {key}={mine!r}, run.json pins {theirs!r} (another set-up "
                "wrote into this output)"
                for key, mine, theirs in self.labelling.differences(pinned)
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


def figure_fields() -> dict[str, Figure]:
    """Each figure of :class:`FileStats`, in field order."""
    return {f.name: f.metadata["figure"] for f in fields(FileStats) if "figure" in f.metadata}


#: What the shard marker and the journal keep of each file.
FIGURES = tuple(figure_fields())
#: What the bulk reader reads of each stats file: the file, its shard and the figures.
ARROW_SCHEMA = pa.schema(
    [("file", pa.string()), ("shard", pa.float64())]
    + [(name, how.arrow_type()) for name, how in figure_fields().items()]
)
