#!/usr/bin/env bash
# The pipeline bubble, measured: the example GPT (gpt_train --pp P) over P stages, one rank per
# stage, for each schedule and number of micro-batches m. Per rank, pipe_wait is the time a stage
# spends in its exchanges with its neighbours per step (wall_clock_breakdown's mean over the
# second half of the steps; min..max over the ranks), beside the share of the step the
# schedule's formula leaves idle with equal stages and free messages:
#   1f1b:                   (p - 1) / (m + p - 1)
#   interleaved (v chunks): (p - 1) / (v m + p - 1)
#   zb-h1:                  (p - 1) / (3 m + p - 1)   with F = B = W (here B and W each run
#                           about half of the backward's work, so F : B : W is nearer 2 : 1 : 1).
# On this machine's 2 cores P = 2 is one rank per core; larger P is time-sliced. Stages are not
# equal: the last holds the head and the loss, the partition balances parameters.
# Environment: BUILD_DIR (build), P (2), MS ("4 8"), STEPS (20), PORT (30375), SHAPE (gpt_train
# shape flags; default 8 layers, d_model 256, 8 heads, context 128).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
P=${P:-2}
MS=${MS:-"4 8"}
STEPS=${STEPS:-20}
PORT=${PORT:-30375}
SHAPE=${SHAPE:-"--n-layer 8 --d-model 256 --n-head 8 --context 128"}
zerorun="$BUILD_DIR/bin/zerorun" train="$BUILD_DIR/bin/gpt_train"
for f in "$zerorun" "$train"; do
  [ -x "$f" ] || { echo "bubble.sh: $f not built (cmake --build $BUILD_DIR --target zerorun gpt_train)" >&2; exit 2; }
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "Pipeline bubble per rank (example GPT: $SHAPE, micro batch 8, fp32, ZeRO stage 1, $P stages,"
echo "one rank each, Gloo on $(nproc) cores): time in exchanges per step, mean of steps $((STEPS / 2 + 1))-$STEPS."
echo
echo "| schedule | m | step ms | pipe_wait ms (min..max over ranks) | waiting, share of step | formula share |"
echo "|---|---|---|---|---|---|"
for m in $MS; do
  for schedule in 1f1b interleaved zb-h1; do
    extra=()
    formula=$(python3 -c "p, m = $P, $m; print(f'{(p - 1) / (m + p - 1):.0%}')")
    if [ "$schedule" = interleaved ]; then
      extra=(--virtual-stages 2)
      formula=$(python3 -c "p, m = $P, $m; print(f'{(p - 1) / (2 * m + p - 1):.0%}')")
    elif [ "$schedule" = zb-h1 ]; then
      formula=$(python3 -c "p, m = $P, $m; print(f'{(p - 1) / (3 * m + p - 1):.0%} (F = B = W)')")
    fi
    OMP_NUM_THREADS=1 "$zerorun" --nproc_per_node "$P" --master_port "$PORT" "$train" \
      --deepspeed_config examples/gpt/ds_config_stage1.json --pp "$P" --schedule "$schedule" \
      "${extra[@]}" $SHAPE --steps "$STEPS" --set gradient_accumulation_steps="$m" \
      --set steps_per_print=$((STEPS / 2)) --set wall_clock_breakdown=true >"$log" 2>&1 ||
      { cat "$log"; echo "bubble.sh: $schedule m $m failed" >&2; exit 1; }
    PORT=$((PORT + 1))
    python3 - "$log" "$schedule" "$m" "$formula" <<'PY'
import re, sys
log, schedule, m, formula = sys.argv[1:]
line = [l for l in open(log) if "time (ms)" in l][-1]
part = lambda name: re.search(rf"\| {name}: ([\d.]+) \(([\d.]+)\.\.([\d.]+)\)", line).groups()
wait, wait_min, wait_max = map(float, part("pipe_wait"))
total = float(part("total")[0])
print(f"| {schedule} | {m} | {total:.1f} | {wait_min:.1f}..{wait_max:.1f} | "
      f"{wait_min / total:.0%}..{wait_max / total:.0%} | {formula} |")
PY
  done
done
