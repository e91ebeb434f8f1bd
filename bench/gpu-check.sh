#!/usr/bin/env bash
# The GPU check, four ways (docs/engine.md, "The GPU check"):
#   bench/gpu-check.sh --prepare   here, with network: bench/.gpu-wheels/ (ignored by git, under
#                                  64 MiB): what a GPU node without network lacks to run --quick
#   bench/gpu-check.sh --quick     on the GPU node: installs from bench/.gpu-wheels/ and prints
#                                  one JSON of per-classifier figures in at most 5 minutes, the
#                                  install included; the summary so far is kept after every
#                                  section in $OUT/gpu-quick.json (OUT set) or bench/out/
#   bench/gpu-check.sh --rehearse  on a CPU machine, with network: --quick as the GPU node runs
#                                  it (preflight, every section, at the CPU's tiny shape) in a
#                                  venv built like the lent image (bench/.gpu-rehearsal/, its
#                                  packages settable below) with only the wheels --prepare carries
#   bench/gpu-check.sh [--cpu] ... the full check (8-10 minutes; the repo's venv), e.g.
#     srun --gres=gpu:1 --cpus-per-task=8 --mem=64G --time=15 bench/gpu-check.sh > gpu-check.json
# Options of the full check go to bench/gpu_check.py (--help); --cpu is CI's smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${SHARDWISE_GPU_WHEELS:-bench/.gpu-wheels}
# The GPU image's Python (3.12 on the machines seen; docs/engine.md) and platform.
TARGET_PYTHON=${SHARDWISE_GPU_PYTHON:-3.12}
SITE=${TMPDIR:-/tmp}/shardwise-gpu-site
# --rehearse: the lent image's packages (docs/engine.md, "The lent image"), each settable.
# Its torch is 2.11.0, a CUDA build; on PyPI that is several GB, so a CPU machine takes the
# CPU build it has on disk unless SHARDWISE_REHEARSE_TORCH names another.
REHEARSAL=${SHARDWISE_REHEARSAL:-bench/.gpu-rehearsal}
REHEARSE_PYTHON=${SHARDWISE_REHEARSE_PYTHON:-python3}
REHEARSE_TORCH=${SHARDWISE_REHEARSE_TORCH:-torch==2.13.0}
REHEARSE_IMAGE=${SHARDWISE_REHEARSE_IMAGE:-transformers==5.17.0 tokenizers==0.23.2 \
huggingface-hub==1.33.0 safetensors==0.8.0 numpy==2.3.5 pyarrow==21.0.0 pyyaml==6.0.3 \
regex==2026.12.2 tqdm==4.70.1 packaging==25.0}

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
  local py; py=${QUICK_PYTHON:-$(python_here)}
  # One wall-clock deadline for the whole check, install included (a lent GPU call is 5
  # minutes): every step below gets what is left of it, and no section starts that cannot
  # end by it (gpu_quick.py --deadline). The summary so far is kept after every section.
  local deadline=$(( $(date +%s) + ${SHARDWISE_GPU_QUICK_S:-300} ))
  left() { local n=$(( deadline - $(date +%s) )); if [ "$n" -lt 1 ]; then n=1; fi; echo "$n"; }
  # No CUDA: one line, within seconds, before anything is installed (a rehearsal runs the
  # CPU's tiny shape instead: --cpu).
  local first; first=$(left); if [ "$first" -gt 60 ]; then first=60; fi
  if [ -z "${REHEARSING:-}" ]; then
    PYTHONPATH=bench timeout "$first" "$py" -c 'import gpu_quick; gpu_quick.cuda_or_exit()'
  fi
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

rehearse() {
  # A venv like the lent image: its packages at the image's versions, no snakemake, no
  # jsonschema, no shardwise; remade when the settings change.
  local venv="$REHEARSAL/venv" stamp="$REHEARSE_PYTHON $REHEARSE_TORCH $REHEARSE_IMAGE"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$REHEARSAL/stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "gpu-check --rehearse: a venv like the lent image in $REHEARSAL: $REHEARSE_TORCH $REHEARSE_IMAGE" >&2
    rm -rf "$REHEARSAL" && mkdir -p "$REHEARSAL"
    "$REHEARSE_PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "$REHEARSE_TORCH"
    # shellcheck disable=SC2086 # one package per word
    "$venv/bin/python" -m pip install -q $REHEARSE_IMAGE
    echo "$stamp" >"$REHEARSAL/stamp"
  fi
  local version
  version=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  # only what --prepare carries, built for that Python, as a GPU node would get it
  WHEELS="$REHEARSAL/wheels" TARGET_PYTHON="$version" prepare
  SHARDWISE_GPU_QUICK_S=${SHARDWISE_GPU_QUICK_S:-900} WHEELS="$REHEARSAL/wheels" \
    SITE="$REHEARSAL/site" QUICK_PYTHON="$venv/bin/python" \
    REHEARSING=1 quick --cpu "$@"
}

case "${1:-}" in
  --prepare) shift; prepare ;;
  --quick) shift; quick "$@" ;;
  --rehearse) shift; rehearse "$@" ;;
  *)
    if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then
      . .venv/bin/activate
    fi
    exec timeout 600 python bench/gpu_check.py "$@" ;;
esac
