#!/usr/bin/env bash
# gpt_allocations_check.sh ZERORUN GPT_TRAIN EXAMPLES_DIR PORT: a training step in steady state
# allocates nothing of the engine's own. The example GPT alone (one process, no communication)
# sets what its autograd allocates per step (LibTorch's CPU allocator: count and bytes, after the
# second step); ZeRO stages 0-3 on 2 ranks, fp32 and bf16 (and stage 0 with its fp32 gradients
# reduced in bf16), must allocate exactly as many tensors per step, of the same bytes (buffers,
# staging, casts for the collectives, gathered stage 3 parameters and the norm's all-reduce are
# all reused).
set -euo pipefail
zerorun=$1; train=$2; examples=$3; port=$4
steps=6
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# field NAME FILE -> the number after "NAME": in FILE's summary line.
field() { grep -o "\"$1\": [0-9.]*" "$2" | tail -1 | sed 's/.*: //'; }

config() {  # config STAGE PRECISION -> a config path
  local out="$tmp/stage$1_$2.json"
  case "$2" in
    fp32) cp "$examples/ds_config_stage$1.json" "$out" ;;
    bf16) sed '1a "bf16": {"enabled": true},' "$examples/ds_config_stage$1.json" >"$out" ;;
    # fp32 gradients (stage 0's default under bf16) cast to bf16 for their reductions
    bf16-comm) sed '1a "bf16": {"enabled": true}, "communication_data_type": "bf16",' \
      "$examples/ds_config_stage$1.json" >"$out" ;;
  esac
  echo "$out"
}

fail=0
for precision in fp32 bf16 bf16-comm; do
  # LOCAL_WORLD_SIZE=2: the threads of one of 2 ranks (layer norm's backward has per-thread scratch).
  env -u RANK -u WORLD_SIZE -u LOCAL_RANK LOCAL_WORLD_SIZE=2 "$train" --deepspeed_config "$(config 0 $precision)" \
    --steps $steps --json_summary >"$tmp/floor.log" 2>&1 || { cat "$tmp/floor.log"; echo "FAIL: the single process"; exit 1; }
  floor_count=$(field cpu_allocations_per_step "$tmp/floor.log")
  floor_bytes=$(field cpu_allocated_bytes_per_step "$tmp/floor.log")
  echo "$precision alone: $floor_count allocations, $floor_bytes bytes per step"
  [ -n "$floor_count" ] && awk -v c="$floor_count" 'BEGIN { exit !(c > 0) }' ||
    { echo "FAIL: no allocations counted for the model alone (is the counter installed?)"; exit 1; }
  stages="0 1 2 3"
  [ "$precision" = bf16-comm ] && stages=0
  for stage in $stages; do
    log="$tmp/stage$stage.log"
    "$zerorun" --nproc_per_node 2 --master_port "$port" "$train" --deepspeed_config \
      "$(config $stage $precision)" --steps $steps --json_summary >"$log" 2>&1 ||
      { cat "$log"; echo "FAIL: stage $stage $precision exited non-zero"; exit 1; }
    port=$((port + 1))
    count=$(field cpu_allocations_per_step "$log")
    bytes=$(field cpu_allocated_bytes_per_step "$log")
    echo "$precision stage $stage on 2 ranks: $count allocations, $bytes bytes per step"
    if [ "$count" != "$floor_count" ] || [ "$bytes" != "$floor_bytes" ]; then
      echo "FAIL: stage $stage $precision allocates $count tensors ($bytes bytes) per step, the model alone $floor_count ($floor_bytes)"
      fail=1
    fi
  done
done

# ZERO_ALLOC_TRACE_BYTES (the header's way to find where a step allocates) names large allocations
# with a backtrace: the model's 3 layers of 128 x 512 MLP weights are 256 KiB each.
env -u RANK -u WORLD_SIZE -u LOCAL_RANK ZERO_ALLOC_TRACE_BYTES=262144 "$train" \
  --deepspeed_config "$(config 0 fp32)" --steps 1 --json_summary >"$tmp/trace.log" 2>&1 ||
  { cat "$tmp/trace.log"; echo "FAIL: the traced run"; exit 1; }
traced=$(grep -c "^zero: CPU allocation of [0-9]* bytes" "$tmp/trace.log" || true)
small=$(grep -o "^zero: CPU allocation of [0-9]* bytes" "$tmp/trace.log" | awk '$5 < 262144' | wc -l)
echo "ZERO_ALLOC_TRACE_BYTES=262144: $traced allocations traced"
grep -q "frame #" "$tmp/trace.log" || { echo "FAIL: no backtrace printed"; fail=1; }
[ "$traced" -gt 0 ] && [ "$small" -eq 0 ] ||
  { echo "FAIL: $traced traced, $small of them below the threshold"; fail=1; }
exit $fail
