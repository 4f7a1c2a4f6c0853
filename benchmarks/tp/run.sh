#!/usr/bin/env bash
# Tensor parallelism on the GPT example (bin/zerorun + bin/gpt_train --tp N, Gloo on loopback,
# one data rank, every block checkpointed): per tensor-parallel degree, rank 0's parameters and
# model-state bytes (falling as 1/tp for the split matrices; the replicated LayerNorms, Row
# biases and position embedding stay whole), its checkpointed block inputs (1/tp with sequence
# parallelism), peak RSS, step time and the time per step the comms logger measured in
# collectives (at one data rank almost all of it the tensor group's), as a table.
# Environment: BUILD_DIR (build), TPS ("1 2 4"), STEPS (10), PORT (30330), SHAPE (gpt_train
# shape flags, default "--n-layer 4 --d-model 256 --n-head 8 --context 128").
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
TPS=${TPS:-"1 2 4"}
STEPS=${STEPS:-10}
PORT=${PORT:-30330}
SHAPE=${SHAPE:-"--n-layer 4 --d-model 256 --n-head 8 --context 128"}
source benchmarks/gpt_bins.sh
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT

# Runs one configuration; prints "params model_states_bytes checkpoint_bytes rss ms comm_ms".
run_one() {
  local tp=$1 log="$log_dir/tp$1_$2.log"
  local sp=()
  [ "$2" = sp ] && sp=(--sequence-parallel)
  # shellcheck disable=SC2086
  "$zerorun" --nproc_per_node "$tp" --master_port "$PORT" "$train" \
    --deepspeed_config examples/gpt/ds_config_stage1.json --set zero_optimization.stage=0 \
    --set comms_logger.enabled=true --steps "$STEPS" --tp "$tp" "${sp[@]}" \
    --checkpoint-activations --json_summary $SHAPE >"$log" 2>&1 || {
    echo "run.sh: tp $tp ($2) failed; log:" >&2; tail -20 "$log" >&2; exit 1; }
  PORT=$((PORT + 1))
  python3 - "$log" "$STEPS" <<'PY'
import json, re, sys
text = [re.sub(r"^\[rank 0\] ", "", l) for l in open(sys.argv[1]) if l.startswith("[rank 0]")]
params = next(int(l.split()[1]) for l in text if re.match(r"gpt_train: \d+ parameters", l))
states = next(float(re.search(r"model states ([0-9.]+) MiB", l).group(1))
              for l in text if re.search(r"memory( \(.*\))?: model states", l))
summary = json.loads(next(l for l in text if l.startswith('{"first_loss"')))
# comms_logger's table: the rows under each op name carry "... Count Total-latency(ms) ...".
comm_ms, op = 0.0, ""
for l in text:
    fields = l.split()
    if len(fields) == 1 and fields[0] in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        op = fields[0]
    elif op and len(fields) >= 6 and re.match(r"^[0-9.]+$", fields[0]):
        comm_ms += float(fields[3])
steps = int(sys.argv[2])
print(params, states * 1048576, summary["checkpoint_peak_bytes"], summary["peak_memory_bytes"],
      summary["ms_per_step"], comm_ms / steps)
PY
}

echo "GPT example ($SHAPE, micro batch 8, fp32 AdamW, stage 0, blocks checkpointed), $STEPS steps,"
echo "one data rank, Gloo over loopback on $(nproc) cores; rank 0's figures."
echo
echo "| tp | sequence parallel | parameters per rank | replicated | model states MiB | vs tp 1 | checkpointed inputs MiB | peak RSS MiB | step ms | collectives ms/step (comms logger) | share |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
base_params="" base_states=""
for tp in $TPS; do
  for mode in plain sp; do
    [ "$tp" = 1 ] && [ "$mode" = sp ] && continue
    read -r params states ckpt rss ms comm < <(run_one "$tp" "$mode")
    [ -n "$base_params" ] || { base_params=$params; base_states=$states; }
    # params(tp) = split / tp + replicated, params(1) = split + replicated.
    awk -v tp="$tp" -v mode="$mode" -v p="$params" -v p1="$base_params" -v s="$states" \
        -v s1="$base_states" -v c="$ckpt" -v rss="$rss" -v ms="$ms" -v comm="$comm" 'BEGIN {
      # (inside printf, ">" would redirect: the comparisons happen here)
      repl = (tp > 1) ? sprintf("%d", (tp * p - p1) / (tp - 1)) : "-"
      sp = (mode == "sp") ? "yes" : "no"
      printf "| %d | %s | %d | %s | %.2f | %.3f | %.2f | %.0f | %.1f | %.1f | %.0f%% |\n", tp,
             sp, p, repl, s / 1048576,
             s / s1, c / 1048576, rss / 1048576, ms, comm, 100 * comm / ms }'
  done
done
