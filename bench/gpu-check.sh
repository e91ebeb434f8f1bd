#!/usr/bin/env bash
# The prepared GPU check (issue 13): run on a node with one CUDA GPU, in the repo's venv
# (with a CUDA build of torch). Prints one JSON summary on stdout (progress on stderr) and
# exits non-zero on any mismatch. Example on a SLURM cluster:
#   srun --gres=gpu:1 --cpus-per-task=8 --mem=64G --time=15 bench/gpu-check.sh > gpu-check.json
# Options go to bench/gpu_check.py (--help); --cpu runs the CPU-safe parts (what CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then
  . .venv/bin/activate
fi
exec timeout 600 python bench/gpu_check.py "$@"
