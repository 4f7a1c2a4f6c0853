#!/usr/bin/env bash
# DistributedOptimizer vs the engine's stage 0 on the example GPT: one zerorun job per rank count,
# both variants interleaved ROUNDS times in the same processes (median step time), as a table.
# Environment: BUILD_DIR (build), RANKS ("1 2 4"), STEPS (30 timed steps), ROUNDS (3), PORT (30240).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
RANKS=${RANKS:-"1 2 4"}
PORT=${PORT:-30240}
bench="$BUILD_DIR/bin/bench_dist_opt"
[ -x "$bench" ] || { echo "run.sh: $bench not built (cmake --build $BUILD_DIR --target bench_dist_opt)" >&2; exit 2; }
echo "| ranks | variant | parameters | step ms (median of ${ROUNDS:-3} rounds of ${STEPS:-30}) | vs stage 0 | last loss |"
echo "|---|---|---|---|---|---|"
for ranks in $RANKS; do
  OMP_NUM_THREADS=1 "$BUILD_DIR/bin/zerorun" --nproc_per_node "$ranks" --master_port "$PORT" \
    --no_local_rank "$bench" 2>/dev/null | sed -n 's/^\[rank 0\] //p' | grep '^|'
  PORT=$((PORT + 1))
done
