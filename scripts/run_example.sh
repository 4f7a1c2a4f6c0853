#!/usr/bin/env bash
# The README's main command: builds the project, then trains the example GPT with ZeRO stage 3
# on two local ranks (zerorun), printing a progress line every steps_per_print steps.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
exec "$BUILD_DIR/bin/zerorun" --nproc_per_node 2 "$BUILD_DIR/bin/gpt_train" \
  --deepspeed_config examples/gpt/ds_config_stage3.json "$@"
