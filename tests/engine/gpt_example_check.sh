#!/usr/bin/env bash
# gpt_example_check.sh ZERORUN GPT_TRAIN CONFIG PORT STEPS: trains the example GPT on 2 ranks
# and checks that it finishes every step and that the loss fell by at least a quarter.
set -euo pipefail
zerorun=$1; train=$2; config=$3; port=$4; steps=$5
out=$("$zerorun" --nproc_per_node 2 --master_port "$port" "$train" --deepspeed_config "$config" --steps "$steps" --json_summary 2>&1)
echo "$out"
grep -q "gpt_train: done, $steps optimizer steps" <<<"$out" || { echo "FAIL: did not finish"; exit 1; }
grep -q "step=$steps, skipped=0, lr=" <<<"$out" || { echo "FAIL: no progress line for step $steps"; exit 1; }
first=$(echo "$out" | grep -oP '"first_loss": \K[0-9.]+' | tail -1)
last=$(echo "$out" | grep -oP '"final_loss": \K[0-9.]+' | tail -1)
echo "loss: first $first, last $last"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.75 * f) }' || { echo "FAIL: loss did not fall"; exit 1; }
