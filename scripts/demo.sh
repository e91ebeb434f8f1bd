#!/usr/bin/env bash
# Set up, then run the built-in demo on the local executor: a small corpus, four tiny
# offline classifiers (random weights: the labels are meaningless), 8 logical shards.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
shardwise demo demo                      # demo/corpus, demo/models, demo/config.yaml
snakemake --dry-run --quiet rules        # prints the coverage report and the plan
snakemake --profile profiles/local       # labels every shard (config/config.yaml runs the demo)
shardwise coverage --run-dir demo/run    # what is done, per category
echo "sidecars, stats and .done markers are under demo/labels/"
