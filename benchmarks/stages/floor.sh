#!/usr/bin/env bash
# The step time of ZeRO stages 0-3 on 2 ranks against the floor: what the ranks take with no
# communication at all, i.e. as many independent single-process runs (world size 1, the same
# per-rank micro batch, one intra-op thread each, as two ranks on this host get) started together.
# Rounds alternate the configurations (floor, stage 0, 1, 2, 3) so that drifts of the machine
# spread over all; each cell is the median over the rounds of the mean step time after the first
# step (gpt_train --json_summary: rank 0's; the floor: the slower process's), beside its peak RSS
# and the CPU tensors it allocates per step after the second (LibTorch's allocator, counted by
# zero::count_cpu_allocations: the engine should add none to the model's own). A last run of each
# stage with wall_clock_breakdown and the comms logger shows where its extra time goes.
# A stage written with an "h" (3h) runs with zero_optimization.host_shared_params: one parameter
# copy the ranks share instead of a copy (or shard) per rank and its all-gathers.
# Environment: BUILD_DIR (build), SHAPES ("small gpt2-small"), PRECISIONS ("fp32 bf16"),
# STAGES ("0 1 2 3 1h 2h 3h"), ROUNDS (3), STEPS_SMALL (40), STEPS_GPT2 (8), PORT (29960),
# BREAKDOWN (1).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
SHAPES=${SHAPES:-"small gpt2-small"}
PRECISIONS=${PRECISIONS:-"fp32 bf16"}
STAGES=${STAGES:-"0 1 2 3 1h 2h 3h"}
ROUNDS=${ROUNDS:-3}
STEPS_SMALL=${STEPS_SMALL:-40}
STEPS_GPT2=${STEPS_GPT2:-8}
PORT=${PORT:-29960}
BREAKDOWN=${BREAKDOWN:-1}
RANKS=2
source benchmarks/gpt_bins.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The arguments of gpt_train for a shape; its step count.
shape_args() {
  case "$1" in
    small) echo "--steps $STEPS_SMALL" ;;  # the README's model: the example configs' defaults
    gpt2-small) echo "--preset gpt2-small --steps $STEPS_GPT2 --set train_micro_batch_size_per_gpu=2" ;;
    *) echo "floor.sh: unknown shape '$1' (small, gpt2-small)" >&2; exit 2 ;;
  esac
}

# The configs, made once: config SHAPE STAGE PRECISION -> its path. The small model runs the
# example's per-stage configs; GPT-2 small its own (buckets and prefetch sized for its layers)
# with the stage set.
for stage in 0 1 2 3; do
  src="examples/gpt/ds_config_stage$stage.json"
  cp "$src" "$work/small_stage${stage}_fp32.json"
  sed '1a "bf16": {"enabled": true},' "$src" >"$work/small_stage${stage}_bf16.json"
  sed "s/\"stage\": 3,/\"stage\": $stage,/" examples/gpt/ds_config_gpt2_small.json >"$work/gpt2-small_stage${stage}_fp32.json"
  sed '1a "bf16": {"enabled": true},' "$work/gpt2-small_stage${stage}_fp32.json" >"$work/gpt2-small_stage${stage}_bf16.json"
done
config() { echo "$work/$1_stage$2_$3.json"; }

# measures LOG -> "ms_per_step peak_MiB allocations_per_step" of the summary line in LOG.
measures() {
  grep -o '{"first_loss".*' "$1" | head -1 | awk '{
    for (i = 1; i <= NF; ++i) { gsub(/[",]/, "", $i); v[$i] = $(i + 1) }
    gsub(/,/, "", v["ms_per_step:"]); gsub(/,/, "", v["peak_memory_bytes:"]); gsub(/,/, "", v["cpu_allocations_per_step:"])
    printf "%s %.0f %s\n", v["ms_per_step:"], v["peak_memory_bytes:"] / 1048576, v["cpu_allocations_per_step:"] }'
}

# run_floor SHAPE PRECISION -> the measures of the slower of RANKS single processes.
run_floor() {
  local pids=() r
  for ((r = 0; r < RANKS; r++)); do
    # shellcheck disable=SC2046
    env -u RANK -u WORLD_SIZE LOCAL_WORLD_SIZE=$RANKS "$train" --deepspeed_config "$(config "$1" 0 "$2")" \
      $(shape_args "$1") --json_summary >"$work/floor$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || { echo "floor.sh: a floor process failed" >&2; cat "$work"/floor*.log >&2; exit 1; }; done
  for ((r = 0; r < RANKS; r++)); do measures "$work/floor$r.log"; done | sort -g | tail -1
}

# run_stage SHAPE PRECISION STAGE [gpt_train args] -> rank 0's measures.
run_stage() {
  local shape=$1 precision=$2 stage=$3 log="$work/stage.log" shared=()
  shift 3
  [ "${stage%h}" = "$stage" ] || shared=(--set zero_optimization.host_shared_params=true)
  PORT=$((PORT + 1))
  # shellcheck disable=SC2046
  "$zerorun" --nproc_per_node $RANKS --master_port $PORT "$train" --deepspeed_config \
    "$(config "$shape" "${stage%h}" "$precision")" $(shape_args "$shape") --json_summary "${shared[@]}" "$@" >"$log" 2>&1 || {
    echo "floor.sh: stage $stage failed:" >&2; tail -20 "$log" >&2; exit 1; }
  measures "$log"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "Step time against the floor: $RANKS ranks on $(nproc) cores, transport ${ZERO_COMM_TRANSPORT:-auto}, medians of $ROUNDS alternated rounds."
echo
echo "| shape | precision | run | step ms | vs floor | peak RSS MiB | CPU allocations per step |"
echo "|---|---|---|---|---|---|---|"
for shape in $SHAPES; do
  for precision in $PRECISIONS; do
    : >"$work/times"
    for ((round = 0; round < ROUNDS; round++)); do
      echo "floor $(run_floor "$shape" "$precision")" >>"$work/times"
      for stage in $STAGES; do
        echo "stage$stage $(run_stage "$shape" "$precision" "$stage")" >>"$work/times"
      done
    done
    floor=$(awk '$1 == "floor" { print $2 }' "$work/times" | median)
    for run in floor $(for s in $STAGES; do echo "stage$s"; done); do
      ms=$(awk -v r="$run" '$1 == r { print $2 }' "$work/times" | median)
      mb=$(awk -v r="$run" '$1 == r { print $3 }' "$work/times" | median)
      allocs=$(awk -v r="$run" '$1 == r { print $4 }' "$work/times" | median)
      awk -v s="$shape" -v p="$precision" -v r="$run" -v ms="$ms" -v f="$floor" -v mb="$mb" -v a="$allocs" \
        'BEGIN { sub(/stage/, "stage ", r); sub(/h$/, " shared", r); printf "| %s | %s | %s | %.1f | %.3fx | %.0f | %s |\n", s, p, r, ms, ms / f, mb, a }'
    done
  done
done

[ "$BREAKDOWN" = 1 ] || exit 0
echo
echo "Where a step goes (one more run of each stage, fp32: wall_clock_breakdown's means over the second"
echo "half of the steps, rank 0's (min..max over ranks); comm = the comms logger's summed latency of"
echo "every collective per step, most of it overlapped with the backward):"
echo
for shape in $SHAPES; do
  steps=$(shape_args "$shape" | sed 's/.*--steps \([0-9]*\).*/\1/')
  for stage in $STAGES; do
    run_stage "$shape" fp32 "$stage" --set wall_clock_breakdown=true --set comms_logger.enabled=true \
      --set steps_per_print=$((steps / 2)) >/dev/null
    comm=$(awk -v steps="$steps" '$1 == "[rank" && $3 ~ /^[0-9.]+$/ && NF >= 10 { sum += $6 }
      END { printf "%.2f", sum / steps }' "$work/stage.log")
    line=$(grep -E "\[rank 0\] time \(ms\)" "$work/stage.log" | tail -1 | sed 's/.*\[rank 0\] time (ms) | //; s/ | mean per step.*//')
    echo "- $shape, stage $stage: $line | comm: $comm"
  done
done
