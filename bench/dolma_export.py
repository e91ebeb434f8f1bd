"""Time `shardwise dolma export`: Dolma attributes of a labelled run, from its sidecars.

Builds a synthetic labelled run of N JSON Lines files (a sidecar and a marker each, as
the shard jobs write them; four classifiers; D documents per file), locally and on a
moto S3 server started here (what the tests use), then times the export of every
file's attributes (no document is read, no model runs) with the export's own threads.
Prints files/s and documents/s for each store; the ratio S3/local is the figure to read
(the same machine, the same run).

    python bench/dolma_export.py [--files 5000] [--docs 200] [--jobs 8]
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from shardwise.config import StorageOptions
from shardwise.ops.dolma import mix as dolma
from shardwise.run import context, outputs, plan, runjson, sidecar
from shardwise.run.markers import FileMarker
from shardwise.run.sharding import shard_for_task
from shardwise.store.location import Location

CLASSIFIERS = ("topic", "topic_nourl", "format", "format_nourl")
LABELS = tuple(f"Label {i}" for i in range(24))


def build(run_dir: Path, documents: str, labels: str, options: StorageOptions, n: int, docs: int):
    """A labelled run of ``n`` files under ``documents`` (names only: no document is read)."""
    rng = np.random.default_rng(0)
    files = sorted(f"cc/c{i % 24:02d}/part-{i:06d}.json.gz" for i in range(n))
    table = plan.build(
        [(rel, 1000) for rel in files], files_per_task=1, total_shards=100,
        minimum_shard_index=0, category_regex="^([^/]+/[^/]+)/",
    )  # fmt: skip
    plan.save(run_dir, table, plan.summarize(table, 100, 0, 1))
    meta = runjson.RunMeta.new(
        total_shards=100, minimum_shard_index=0, files_per_task=1, input_uri=documents,
        output_uri=labels, task_count=n, fingerprint=runjson.fingerprint(files),
        classifiers=[(c, "m", "text") for c in CLASSIFIERS],
    )  # fmt: skip
    runjson.replace(Location(str(run_dir)), meta)
    attributes = documents.rsplit("/", 1)[0] + "/attributes/weborganizer"
    settings = context.RunSettings(
        input=context.RecordedInput("auto", "id", "text"),
        storage=options,
        roots=context.RecordedRoots(input=documents, output=labels),
        dolma=context.RecordedDolma("weborganizer", attributes),
    )
    context.write_settings(run_dir, settings)
    out = Location(labels, options)
    for rel in files:
        probs = rng.dirichlet(np.ones(len(LABELS)), size=docs)
        columns = {}
        for c in CLASSIFIERS:
            columns.update(sidecar.label_columns(c, probs, LABELS, with_probs=False))
        ids = [f"{rel}-{i}" for i in range(docs)]
        out.write_bytes(
            outputs.SIDECAR.rel(rel), sidecar.to_parquet_bytes(sidecar.build_table(ids, columns))
        )
        marker = FileMarker.now(rel, rel, shard_for_task(rel, 100), docs, None)
        out.write_bytes(outputs.MARKER.rel(rel), marker.to_json())


def timed(run_dir: Path, n: int, docs: int, jobs: int) -> tuple[float, float]:
    """(files/s, documents/s) of one export of every file."""
    started = time.perf_counter()
    done = dolma.export(run_dir, jobs=jobs, progress=False)
    seconds = time.perf_counter() - started
    assert done.written == n, done
    return n / seconds, n * docs / seconds


def start_s3() -> tuple[StorageOptions, object]:
    """A moto S3 server on localhost with fake credentials, and a bucket."""
    import boto3
    from moto.server import ThreadedMotoServer

    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
    )  # fmt: skip
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
    return StorageOptions(endpoint_url=endpoint, addressing_style="path"), server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--docs", type=int, default=200, help="documents per file")
    parser.add_argument("--jobs", type=int, default=8, help="the export's threads")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root / "local-run", str(root / "ds/documents"), str(root / "labels"),
              StorageOptions(), args.files, args.docs)  # fmt: skip
        rows.append(("local", *timed(root / "local-run", args.files, args.docs, args.jobs)))
        options, server = start_s3()
        try:
            prefix = f"s3://bench/{secrets.token_hex(4)}"
            build(root / "s3-run", f"{prefix}/ds/documents", f"{prefix}/labels", options,
                  args.files, args.docs)  # fmt: skip
            rows.append(("S3 (moto)", *timed(root / "s3-run", args.files, args.docs, args.jobs)))
        finally:
            server.stop()
    print(f"dolma export of {args.files:,} files x {args.docs} documents, {args.jobs} threads:")
    for store, files_s, docs_s in rows:
        print(f"  {store:<10} {files_s:8.1f} files/s  {docs_s:10,.0f} docs/s")
    print(f"  S3 / local: {rows[1][1] / rows[0][1]:.2f}x the files/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
