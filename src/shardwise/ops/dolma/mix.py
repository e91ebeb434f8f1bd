"""``shardwise dolma``: Dolma attributes for a labelled run, and a ``dolma mix`` config.

``export`` writes the missing attributes of every labelled JSON Lines file from its
sidecar alone (a run labelled before ``output.dolma`` was on), in threads; resumable and
idempotent (what exists is kept unless ``force``). ``mix_config`` keeps the documents of
chosen labels or cells, with their attributes where the mixer looks.
"""

import ipaddress
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlparse

import yaml
from tqdm import tqdm

from shardwise.config import StorageOptions
from shardwise.errors import ConfigError, InputError
from shardwise.ops.common.text import near_labels
from shardwise.ops.dolma import exact as dolma_exact
from shardwise.run import dolma, outputs, plan, summaries
from shardwise.run.opened import OpenRun, open_run
from shardwise.store.atomic import json_bytes, write_atomic
from shardwise.store.location import Location

#: ``<run_dir>/dolma/<shard>.done``: the Snakemake target of one shard's export.
DOLMA_DIR = "dolma"


@dataclass(frozen=True, kw_only=True)
class Exported:
    """What ``export`` did."""

    written: int  # attributes files written now
    present: int  # labelled files that had them already (kept)
    not_jsonl: int  # labelled Parquet files: dolma does not read them, none is written
    unlabelled: int  # planned files (not quarantined) without a marker yet: nothing to export
    root: str  # the attributes root

    def line(self) -> str:
        """One line for the console."""
        text = f"dolma attributes under {self.root}: {self.written:,} written, {self.present:,} "
        text += f"already there, {self.not_jsonl:,} Parquet file(s) skipped (dolma reads JSON "
        return text + f"Lines only), {self.unlabelled:,} file(s) not labelled yet"


def attributes_of(ctx: OpenRun) -> Location:
    """The run's attributes root; ConfigError saying how to turn ``output.dolma`` on."""
    if ctx.attributes is None:
        msg = f"{ctx.run_dir}: output.dolma is off in this run's settings: set "
        msg += "output.dolma.enabled: true in the config (and output.dolma.uri unless input.uri "
        msg += "ends in /documents), run `snakemake -n` to record it, then run this again"
        raise ConfigError(msg)
    return ctx.attributes


def export(
    run_dir: Path,
    *,
    shard: int | None = None,
    jobs: int = 8,
    force: bool = False,
    progress: bool = True,
) -> Exported:
    """Write the missing attributes of the run's labelled files (``shard``'s only)."""
    ctx = open_run(run_dir)
    attributes = attributes_of(ctx)
    table = ctx.plan
    files = (plan.files_of_shard(table, shard) if shard is not None else table)["file"].to_pylist()
    left_out = ctx.quarantined
    files = [rel for rel in files if rel not in left_out]
    marked = outputs.marked(ctx.output)
    labelled = [rel for rel in files if rel in marked]
    jsonl = [rel for rel in labelled if dolma.applies(rel)]
    have = set() if force else {rel for rel, _ in attributes.list_files()}
    todo = [rel for rel in jsonl if rel not in have]
    bar = tqdm(total=len(todo), unit="file", desc="dolma export", disable=not progress)
    roots, name = ctx.roots(), ctx.settings.dolma_name

    def one(rel: str) -> None:
        outputs.rebuild(roots, rel, name)
        bar.update(1)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, todo))
    bar.close()
    done = Exported(
        written=len(todo),
        present=len(jsonl) - len(todo),
        not_jsonl=len(labelled) - len(jsonl),
        unlabelled=len(files) - len(labelled),
        root=attributes.uri,
    )
    if shard is not None:
        if done.unlabelled:
            msg = f"shard {shard}: {done.unlabelled:,} file(s) are not labelled yet, so their "
            msg += "attributes cannot be written: run snakemake to label them first"
            raise InputError(msg)
        write_atomic(ctx.run_dir / DOLMA_DIR / f"{shard}.done", json_bytes(vars(done)))
    return done


@dataclass(frozen=True)
class Selection:
    """Keep a document when every (classifier, label) holds: one label, or one cell."""

    conditions: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, text: str) -> Self:
        """``topic=Health`` or ``topic=Health,format=Tutorial`` (a cell)."""
        conditions = []
        for part in text.split(","):
            classifier, eq, label = part.partition("=")
            if not eq or not classifier.strip() or not label.strip():
                msg = f"--keep {text!r}: give CLASSIFIER=LABEL[,CLASSIFIER=LABEL], "
                raise ConfigError(msg + "e.g. topic=Health")
            conditions.append((classifier.strip(), label.strip()))
        return cls(tuple(conditions))

    def jq(self, name: str, min_prob: float | None) -> str:
        """The jq filter dolma mix evaluates on each document."""
        terms = []
        for classifier, label in self.conditions:
            attribute = dolma.key(name, classifier, "label")
            terms.append(f".attributes.{attribute} == {json.dumps(label)}")
            if min_prob is not None:
                terms.append(f".attributes.{dolma.key(name, classifier, 'prob')} >= {min_prob}")
        return " and ".join(terms)


def mix_config(
    run_dir: Path,
    keep: Sequence[Selection],
    output: str,
    *,
    min_prob: float | None = None,
    stream: str = "weborganizer",
    processes: int = 1,
) -> dict[str, Any]:
    """The ``dolma mix`` config keeping the documents of ``keep`` (any of them); where a
    file's name would match another's under dolma's pattern matching, its attributes are
    copied to a set of their own first (:mod:`shardwise.ops.dolma.exact`)."""
    if not keep:
        raise ConfigError("give at least one --keep CLASSIFIER=LABEL (or a cell)")
    ctx = open_run(run_dir)
    attributes = attributes_of(ctx)
    name = ctx.settings.dolma_name or "weborganizer"
    check_where_dolma_looks(ctx.source, attributes, name)
    _check_labels(ctx, keep)
    marked = outputs.marked(ctx.output)
    labelled = [rel for rel in ctx.plan["file"].to_pylist() if rel in marked and dolma.applies(rel)]
    have = {rel for rel, _ in attributes.list_files()}
    missing = [rel for rel in labelled if rel not in have]
    if missing:
        msg = f"{len(missing):,} labelled file(s) have no attributes yet (e.g. "
        msg += f"{attributes.url(missing[0])}): dolma mix would silently drop their documents. "
        raise ConfigError(msg + f"Run `shardwise dolma export --run-dir {run_dir}` first")
    if not labelled:
        raise ConfigError(f"{run_dir}: no JSON Lines file of this run is labelled yet")
    include = [s.jq(name, min_prob) for s in keep]
    sets = dolma_exact.group(labelled, have, *dolma_exact.corpus_matching(ctx.source))
    dolma_exact.write_extra_sets(attributes, name, sets)
    found = dolma_exact.streams(stream, ctx.source, name, sets)
    streams = [mix_stream(s, documents, a, output, include) for s, documents, a in found]
    return {"streams": streams, "processes": processes}


def mix_stream(
    name: str, documents: list[str], attributes: str, output: str, include: list[str]
) -> dict[str, Any]:
    """One stream of a ``dolma mix`` config: ``documents`` with the attribute set
    ``attributes``, kept where a jq expression of ``include`` holds, into ``output``."""
    return {
        "name": name,
        "documents": documents,
        "attributes": [attributes],
        "output": {"path": output, "max_size_in_bytes": 1_000_000_000},
        "filter": {"syntax": "jq", "include": include},
    }


def mix_yaml(config: dict[str, Any], options: StorageOptions | None = None) -> str:
    """The config as dolma reads it; where it reads or writes an object store, headed by
    the environment dolma needs for that (:func:`store_environment`)."""
    head = "".join(f"# {line}\n" for line in store_environment(config, options))
    return head + yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=1000)


def store_environment(config: dict[str, Any], options: StorageOptions | None) -> list[str]:
    """What dolma needs to reach the object store that a mix ``config`` names: it reads
    and writes s3:// paths with its own client, which knows nothing of the run's
    ``storage:`` settings and takes the region from ``REGION``, not ``AWS_REGION``. Empty
    for a config of local paths only."""
    paths = [p for s in config["streams"] for p in [*s["documents"], s["output"]["path"]]]
    if not any(p.split("://", 1)[0].lower() in ("s3", "s3a") for p in paths):
        return []
    options = options or StorageOptions()
    lines = [
        "dolma reads and writes s3:// with its own S3 client, not the run's storage: settings;",
        "give it the store in its environment before `dolma -c <this file> mix`:",
    ]
    if options.endpoint_url:
        lines.append(f"  export AWS_ENDPOINT_URL={options.endpoint_url}")
    else:
        lines.append("  (AWS S3: no endpoint; R2 or another store: export AWS_ENDPOINT_URL=...)")
    region = options.region or "<the bucket's region; R2: auto>"
    lines.append(f"  export REGION={region}  # dolma reads REGION, not AWS_REGION")
    if options.profile:
        lines.append(f"  export AWS_PROFILE={options.profile}")
    else:
        lines.append("  and the credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY")
    unreachable = dolma_cannot_reach(options, _buckets(paths))
    return lines + unreachable


#: Endpoints whose stores answer a bucket by host name (what dolma's client asks).
VIRTUAL_HOSTS = ("amazonaws.com", "r2.cloudflarestorage.com")


def dolma_cannot_reach(options: StorageOptions, buckets: Sequence[str] = ()) -> list[str]:
    """Why dolma (1.2.1) cannot reach this store, as header lines (none when it can): its
    client always addresses a bucket by host name (``<bucket>.<host>``), which a store that
    needs path-style addressing, or an endpoint given as a host name of a store without
    per-bucket host names (MinIO, Ceph), does not answer: a DNS error on ``bucket.host``.
    An IP address endpoint gets path-style from the client itself; AWS and R2 answer
    bucket host names."""
    host = urlparse(options.endpoint_url or "").hostname or ""
    named = bool(host) and not _is_ip(host) and not host.endswith(VIRTUAL_HOSTS)
    if options.addressing_style != "path" and not named:
        return []
    bucket = buckets[0] if buckets else "<bucket>"
    why = (
        "the run's storage.addressing_style is path"
        if options.addressing_style == "path"
        else (f"the endpoint {options.endpoint_url} is a host name")
    )
    return [
        f"WARNING: dolma 1.2.1 cannot reach this store as configured: {why}, and dolma's",
        f"  client always asks for the bucket by host name ({bucket}.{host or '<host>'}):",
        "  `dolma mix` fails with a DNS error. Either give it an endpoint that answers bucket",
        "  host names",
        "  (the store's virtual-host endpoint, or a DNS name for each bucket), or mix from a",
        "  local copy: copy the documents and the attributes (same layout) to a local folder,",
        "  write this config for it (the same command with the run's output copied there), and",
        "  run dolma on the copy.",
    ]


def _buckets(paths: Sequence[str]) -> list[str]:
    return [urlparse(p).netloc for p in paths if urlparse(p).scheme.lower() in ("s3", "s3a")]


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost"
    return True


def store_options(run_dir: Path) -> StorageOptions:
    """The run's storage options (what :func:`mix_yaml` says dolma needs)."""
    return open_run(run_dir).source.options


def check_where_dolma_looks(source: Location, attributes: Location, name: str) -> None:
    """dolma mix finds a document's attributes by replacing ``/documents/`` in its path
    with ``/attributes/<name>/``: refuse a layout where that is not where they are."""
    root = source.address("").rstrip("/")
    parent, _, last = root.rpartition("/")
    if last != "documents" or attributes.address("").rstrip("/") != f"{parent}/attributes/{name}":
        msg = f"dolma mix looks for the attributes of {root}/<rel> at "
        msg += f"{parent}/attributes/{name}/<rel> (it replaces /documents/ in the path), but this "
        msg += f"run writes them to {attributes.uri}: keep the documents under .../documents and "
        raise ConfigError(msg + "leave output.dolma.uri unset")


def _check_labels(ctx: OpenRun, keep: Sequence[Selection]) -> None:
    """Every classifier is the run's, every label one the run's documents were given."""
    classifiers = [n for n, _m, _k in ctx.meta.classifiers]
    got, _ = summaries.read_many(ctx.run_dir, summaries.summarized_shards(ctx.run_dir))
    seen = summaries.label_sets(got)
    for selection in keep:
        for classifier, label in selection.conditions:
            if classifier not in classifiers:
                names = ", ".join(classifiers)
                msg = f"--keep: {classifier!r} is not a classifier of this run ({names})"
                raise ConfigError(msg)
            known = seen.get(classifier, set())
            if label not in known:
                msg = f"--keep: no labelled document has {classifier} {label!r}"
                msg += f"{near_labels(label, known)} "
                msg += f"(labels seen: {', '.join(sorted(known)) or 'none yet'})"
                raise ConfigError(msg)
