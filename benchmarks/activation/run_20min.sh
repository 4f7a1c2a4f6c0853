#!/usr/bin/env bash
# The long run of README.md: the GPT-2-small-shaped example (85M parameters, context 256) at ZeRO
# stage 3 with activation checkpointing on 2 ranks for MINUTES (20) of wall time or STEPS (120)
# steps, whichever ends first; prints the last loss line reached, then a sample. Uses both cores.
# Environment: BUILD_DIR (build), MINUTES (20), STEPS (120), PORT (30190), EXTRA (gpt_train args).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
MINUTES=${MINUTES:-20}
STEPS=${STEPS:-120}
PORT=${PORT:-30190}
EXTRA=${EXTRA:-}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
# shellcheck disable=SC2086
timeout --signal=TERM "${MINUTES}m" "$BUILD_DIR/bin/zerorun" --nproc_per_node 2 --master_port "$PORT" \
  "$BUILD_DIR/bin/gpt_train" --deepspeed_config examples/gpt/ds_config_gpt2_small.json \
  --preset gpt2-small --checkpoint-activations --steps "$STEPS" --sample 60 $EXTRA 2>&1 | tee "$log" || true
echo "---"
echo "wall time: $(( $(date +%s) - start )) s (limit ${MINUTES} min)"
grep -E '\] step=' "$log" | head -1
grep -E '\] step=' "$log" | tail -1
