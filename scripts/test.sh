#!/usr/bin/env bash
# Set up, then run every check and the whole test suite: lint (ruff, snakefmt,
# snakemake --lint) and pytest, including the slow tests; without arguments the SLURM tests
# run beside the others (they mostly wait on the scheduler), and the racing tests run
# again under a slowed snakemake start-up (tests/slowstart); with arguments, pytest "$@".
# The SLURM tests start a real single-node cluster with tests/slurm/cluster.sh
# (apt-installs Debian's slurm, munge and mariadb; needs root); the S3 tests start moto's
# server; the Dolma tests run the real `dolma mix` from .venv-dolma (installed here).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
# The real Dolma toolkit in its own venv (it pins numpy<2, tokenizers<=0.19 and s3fs 2023.6:
# it cannot share shardwise's); boto3/botocore pinned beside it, or pip backtracks for ages.
if [ ! -x .venv-dolma/bin/dolma ]; then
  python3 -m venv .venv-dolma
  .venv-dolma/bin/python -m pip install --quiet dolma==1.2.1 boto3==1.28.17 botocore==1.31.17
fi
export SHARDWISE_DOLMA="$PWD/.venv-dolma/bin/dolma" SHARDWISE_REQUIRE_DOLMA=1
. .venv/bin/activate
if [ "$(id -u)" = 0 ]; then
  export SHARDWISE_REQUIRE_SLURM="${SHARDWISE_REQUIRE_SLURM:-1}"  # fail, never skip, as root
fi
ruff check src tests bench
ruff format --check src tests bench
snakefmt --check Snakefile workflow/rules/
lint_dir=$(mktemp -d)
shardwise demo "$lint_dir" >/dev/null
snakemake --lint --configfile "$lint_dir/config.yaml" >/dev/null
rm -rf "$lint_dir"
if [ "$#" != 0 ]; then
  exec pytest --durations=30 "$@"  # the slowest tests, to keep CI under its hour
fi
# The SLURM tests mostly wait on the scheduler (a maintenance window minutes ahead, a
# preemption, a node coming back): they run beside the rest, in a session of their own
# (its log follows theirs). Each waits for events the code produces, never for time.
slurm_log=$(mktemp)
pytest --durations=15 -m slurm -p no:cacheprovider >"$slurm_log" 2>&1 &
slurm_pid=$!
rc=0
pytest --durations=25 -m "not slurm" || rc=$?
# The tests that race a run (kill, restart, a second run) once more with every snakemake
# start slowed by 10 s (a SLURM client that waits for a controller): they synchronise on
# events the code produces, never on time, so they must pass here too.
PATH="$PWD/tests/slowstart:$PATH" pytest -m "race and not slurm" -p no:cacheprovider || rc=$?
slurm_rc=0
wait "$slurm_pid" || slurm_rc=$?
echo "=== the SLURM tests (run beside the others) ==="
cat "$slurm_log"
rm -f "$slurm_log"
if [ "$slurm_rc" != 0 ]; then rc=$slurm_rc; fi
exit "$rc"
