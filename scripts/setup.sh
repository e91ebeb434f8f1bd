#!/usr/bin/env bash
# Create .venv and install shardwise with pinned dependencies (CPU PyTorch).
# Usage: scripts/setup.sh [extra]   e.g. scripts/setup.sh test
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# torch first and pinned: 2.13.0 is the CPU build; an unpinned torch pulls a multi-GB CUDA build.
python -m pip install --quiet torch==2.13.0
if [ -n "$extra" ]; then
  python -m pip install --quiet -e ".[$extra]"
else
  python -m pip install --quiet -e .
fi
