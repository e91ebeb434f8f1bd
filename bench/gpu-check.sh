#!/usr/bin/env bash
# The GPU check, three ways (docs/engine.md, "The GPU check"):
#   bench/gpu-check.sh --prepare   here, with network: bench/.gpu-wheels/ (ignored by git, under
#                                  64 MiB): what a GPU node without network lacks to run --quick
#   bench/gpu-check.sh --quick     on the GPU node: installs from bench/.gpu-wheels/ and prints
#                                  one JSON of per-classifier figures in at most 5 minutes, the
#                                  install included; the summary so far is kept after every
#                                  section in $OUT/gpu-quick.json (OUT set) or bench/out/
#   bench/gpu-check.sh [--cpu] ... the full check (8-10 minutes; the repo's venv), e.g.
#     srun --gres=gpu:1 --cpus-per-task=8 --mem=64G --time=15 bench/gpu-check.sh > gpu-check.json
# Options of the full check go to bench/gpu_check.py (--help); --cpu is CI's smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${SHARDWISE_GPU_WHEELS:-bench/.gpu-wheels}
# The GPU image's Python (3.12 on the machines seen; docs/engine.md) and platform.
TARGET_PYTHON=${SHARDWISE_GPU_PYTHON:-3.12}
SITE=${TMPDIR:-/tmp}/shardwise-gpu-site

python_here() {
  if [ -n "${VIRTUAL_ENV:-}" ]; then echo python
  elif [ -x .venv/bin/python ]; then echo .venv/bin/python
  else echo python3; fi
}

# The project's pins of what the check imports and a GPU image may lack or hold older.
pins() {
  "$(python_here)" - <<'EOF'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
for dep in deps:
    if re.match(r"(transformers|tokenizers|zstandard)==", dep):
        print(dep)
EOF
}

prepare() {
  local py; py=$(python_here)
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  echo "gpu-check --prepare: wheels for Python $TARGET_PYTHON on x86_64 into $WHEELS" >&2
  # shellcheck disable=SC2046 # one pin per word
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$TARGET_PYTHON" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$WHEELS" $(pins)
  "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" . 2>/dev/null \
    || "$py" -m pip wheel -q --no-deps -w "$WHEELS" .
  local size; size=$(du -sb "$WHEELS" | cut -f1)
  ls -1 "$WHEELS" >&2
  if [ "$size" -ge $((64 * 1024 * 1024)) ]; then
    echo "gpu-check --prepare: $WHEELS is $((size / 1048576)) MiB, over the 64 MiB a GPU call carries" >&2
    exit 1
  fi
  echo "gpu-check --prepare: $((size / 1048576)) MiB; carry $WHEELS to the GPU node and run bench/gpu-check.sh --quick" >&2
}

quick() {
  local py; py=$(python_here)
  # One wall-clock deadline for the whole check, install included (a lent GPU call is 5
  # minutes): every step below gets what is left of it, and no section starts that cannot
  # end by it (gpu_quick.py --deadline). The summary so far is kept after every section.
  local deadline=$(( $(date +%s) + ${SHARDWISE_GPU_QUICK_S:-300} ))
  left() { local n=$(( deadline - $(date +%s) )); if [ "$n" -lt 1 ]; then n=1; fi; echo "$n"; }
  # No CUDA: one line, within seconds, before anything is installed.
  local first; first=$(left); if [ "$first" -gt 60 ]; then first=60; fi
  PYTHONPATH=bench timeout "$first" "$py" -c 'import gpu_quick; gpu_quick.cuda_or_exit()'
  if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    rm -rf "$SITE"
    timeout "$(left)" "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target "$SITE" "$WHEELS"/*.whl
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "gpu-check --quick: no $WHEELS (bench/gpu-check.sh --prepare makes it): using what is installed" >&2
  fi
  # Every missing module or too-old package in one line, before any section.
  PYTHONPATH="bench:${PYTHONPATH:-}" timeout "$(left)" "$py" -c \
    'import gpu_quick; gpu_quick.preflight_or_exit()'
  PYTHONPATH="bench:${PYTHONPATH:-}" exec timeout "$(left)" "$py" bench/gpu_quick.py \
    --deadline "$deadline" "$@"
}

case "${1:-}" in
  --prepare) shift; prepare ;;
  --quick) shift; quick "$@" ;;
  *)
    if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then
      . .venv/bin/activate
    fi
    exec timeout 600 python bench/gpu_check.py "$@" ;;
esac
