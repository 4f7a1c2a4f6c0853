#!/usr/bin/env bash
# Memory of pipeline stages, measured: the GPT-2-small-shaped example (gpt_train --preset
# gpt2-small: 12 layers, d_model 768, 12 heads, context 256; micro batch 1, 4 micro-batches per
# step, fp32 AdamW) on 4 ranks as pp 1 x dp 4, pp 2 x dp 2 and pp 4 x dp 1, at ZeRO stages 1 and
# 3. Per pipeline stage: the layers it holds, its parameters (each rank's own count; at ZeRO
# stage 3 that is the whole stage too, gathered for the batch) as a share of the model's, and
# the peak RSS of its ranks (the OS's figure, getrusage, min..max over the stage's data ranks).
# A stage holds its share of the parameters, their gradients and (divided over its data ranks)
# the optimizer state, plus the activations 1F1B keeps: up to p - s micro-batches in flight on
# stage s. Everything runs time-sliced on this machine's cores: only the memory counts here.
# Environment: BUILD_DIR (build), PPS ("1 2 4"), STAGES ("1 3"), STEPS (2), PORT (30380),
# SHAPE (gpt_train shape flags, default "--preset gpt2-small").
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
PPS=${PPS:-"1 2 4"}
STAGES=${STAGES:-"1 3"}
STEPS=${STEPS:-2}
PORT=${PORT:-30380}
SHAPE=${SHAPE:-"--preset gpt2-small"}
WORLD=4
source benchmarks/gpt_bins.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "Peak RSS per pipeline stage (example GPT: $SHAPE, micro batch 1, 4 micro-batches, fp32"
echo "AdamW, 1F1B, $WORLD ranks, Gloo on $(nproc) cores, time-sliced), after $STEPS steps."
echo
echo "| ZeRO stage | grid | pipeline stage | layers | parameters per rank | share of the model | peak RSS MiB per rank (min..max) |"
echo "|---|---|---|---|---|---|---|"
for zero_stage in $STAGES; do
  for pp in $PPS; do
    pipe=()
    [ "$pp" -gt 1 ] && pipe=(--pp "$pp")
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 "$zerorun" --nproc_per_node "$WORLD" --master_port "$PORT" "$train" \
      --deepspeed_config examples/gpt/ds_config_stage1.json "${pipe[@]}" $SHAPE \
      --set zero_optimization.stage="$zero_stage" --set train_micro_batch_size_per_gpu=1 \
      --set gradient_accumulation_steps=4 --steps "$STEPS" --json_summary >"$log" 2>&1 ||
      { tail -30 "$log"; echo "memory.sh: ZeRO stage $zero_stage pp $pp failed" >&2; exit 1; }
    PORT=$((PORT + 1))
    python3 - "$log" "$zero_stage" "$pp" "$WORLD" <<'PY'
import json, re, sys
log, zero_stage, pp, world = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ranks = {}
partition = None
for line in open(log):
    m = re.match(r"\[rank (\d+)\] (\{.*\})\s*$", line)
    if m:
        summary = json.loads(m.group(2))
        ranks[int(m.group(1))] = summary
    m = re.search(r"pipeline partition \([^)]*\): (.*)$", line)
    if m:
        partition = [p.split(": ", 1)[1] for p in m.group(1).split("; ")]
assert len(ranks) == world, f"{len(ranks)} summaries of {world} ranks"
dp = world // pp
# The grid's order: data ranks inside a pipeline stage are consecutive (tensor size 1).
per_stage = [[ranks[s * dp + d] for d in range(dp)] for s in range(pp)]
for s, stage in enumerate(per_stage):
    params = stage[0]["parameters"]
    rss = [r["peak_memory_bytes"] / 2**20 for r in stage]
    layers = partition[s].split(" (")[0].replace("layers ", "") if partition else "all"
    first, _, last = layers.partition("-")
    layers = first if first == last else layers
    print(f"| {zero_stage} | pp {pp} x dp {dp} | {s} | {layers} | {params} | SHARE{params} | "
          f"{min(rss):.0f}..{max(rss):.0f} |")
PY
  done
done >"$log.table"
# The model's parameters: pp 1's count (whole on every rank); each row's share of it.
python3 - "$log.table" <<'PY'
import re, sys
rows = open(sys.argv[1]).read().splitlines()
model = next(int(re.search(r"\| all \| (\d+) \|", r).group(1)) for r in rows if "| all |" in r)
for r in rows:
    print(re.sub(r"SHARE(\d+)", lambda m: f"{int(m.group(1)) / model:.2f}", r))
PY
rm -f "$log.table"
