"""One door into a run directory: :func:`open_run` reads run.json, settings.json and the
roots at once; the plan, the done shards and the quarantine are read on first use, once.

Every command and job opens its run here and passes the record on, so a done shard, a
root or a field path means one thing in every view (``markers.DoneShards``).
"""

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pyarrow as pa

from shardwise.errors import InputError
from shardwise.run import markers, plan, quarantine, runjson, state
from shardwise.run.context import SETTINGS_JSON, RunSettings, fields_for, read_settings
from shardwise.run.fields import FieldPaths
from shardwise.run.sharding import shard_range
from shardwise.store.location import Location


@dataclass(frozen=True, eq=False, kw_only=True)
class OpenRun:
    """A planned run directory: what run.json pins, what settings.json records (None only
    where it was opened without it: a run directory planned by an older version), the
    roots; ``plan``, ``done`` and ``quarantined`` read when first asked for. The planner,
    which writes these files, reads them itself (before a run.json vouches for them)."""

    run_dir: Path
    meta: runjson.RunMeta
    settings: RunSettings | None
    source: Location
    output: Location
    attributes: Location | None = None  # the Dolma attributes root, when enabled

    @property
    def fields(self) -> FieldPaths:
        """The reader's fields: the url only when a classifier reads it."""
        return fields_for(self._settings(), self.meta.classifiers)

    @property
    def fmt(self) -> str:
        """The input format settings.json records."""
        return self._settings().input.format

    def _settings(self) -> RunSettings:
        if self.settings is None:
            raise _no_settings(self.run_dir)
        return self.settings

    @property
    def shards(self) -> range:
        """The pinned shard numbers."""
        return shard_range(self.meta.total_shards, self.meta.minimum_shard_index)

    def roots(self) -> dict[str, Location]:
        """The roots a file's outputs go to, by name (``outputs.OutputKind.root``)."""
        found = {"output": self.output}
        if self.attributes is not None:
            found["attributes"] = self.attributes
        return found

    @cached_property
    def plan(self) -> pa.Table:
        """``plan.parquet`` in one chunk, checked against run.json's assignment."""
        return state.read_plan(self.run_dir, self.meta)

    @cached_property
    def plan_as_written(self) -> pa.Table:
        """``plan.parquet`` as it is, not checked against the assignment: what ``verify``
        inspects (a plan of another assignment is one of its findings) and repairs."""
        return plan.load(self.run_dir)

    @cached_property
    def done(self) -> markers.DoneShards:
        """The shard markers that vouch for their shard under this plan."""
        per_shard = plan.files_per_shard(self.plan)
        return markers.read_done(self.run_dir, self.shards, per_shard)

    @cached_property
    def quarantined(self) -> dict[str, quarantine.Entry]:
        """The files left out of the run, with why (as when first asked)."""
        return quarantine.load(self.run_dir)

    def quarantined_now(self) -> dict[str, quarantine.Entry]:
        """The files left out of the run as ``quarantine.json`` says this moment: what a
        shard job asks before each file, so a quarantine made while it runs holds."""
        return quarantine.load(self.run_dir)


def open_run(run_dir: Path, *, settings_required: bool = True) -> OpenRun:
    """Open the run in ``run_dir``: run.json (RunMismatchError when it cannot be read as
    pinned) and settings.json (InputError when it is missing and ``settings_required``:
    jobs and commands that read the input need it; views of older runs do not)."""
    run_dir = Path(run_dir)
    meta = runjson.read_run_dir(run_dir)
    settings = read_settings(run_dir)
    if settings is None:
        if settings_required:
            raise _no_settings(run_dir)
        return OpenRun(
            run_dir=run_dir,
            meta=meta,
            settings=None,
            source=Location(meta.input_uri),
            output=Location(meta.output_uri),
        )
    source, output = settings.locations(meta)
    return OpenRun(
        run_dir=run_dir,
        meta=meta,
        settings=settings,
        source=source,
        output=output,
        attributes=settings.attributes(),
    )


def _no_settings(run_dir: Path) -> InputError:
    return InputError(f"{run_dir / SETTINGS_JSON} is missing: start the run with snakemake")
