#!/usr/bin/env bash
# One transformer layer's activations per rank at tensor-parallel degrees 1, 2, 4 (one data
# rank), with and without sequence parallelism, measured against Megatron's formulas
# (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
# section 4: 16-bit activations, 1-byte dropout masks, per layer):
#   tensor parallel:              s b h (10 + 24/t + 5 a s / (h t))
#   tensor + sequence parallel:   s b h (34 + 5 a s / h) / t
# Our activations are fp32, and LibTorch's CPU dropout keeps its mask in the input's dtype, so
# every 2-byte tensor and every 1-byte mask of those formulas weighs 4 bytes here: the same
# terms counted in elements, times 4:
#   tensor parallel:              4 s b h (6 + 12/t + 3 a s / (h t))
#   tensor + sequence parallel:   4 s b h (18 + 3 a s / h) / t
# Measured: bin/act_bench (no checkpointing, ZeRO stage 0, dropout 0.1) installs LibTorch's
# allocator memory hook for one step and records, for each block, the live CPU bytes its forward
# added (what autograd keeps for backward, plus its output, which is the next block's input);
# rank 0's mean over the blocks is one layer.
# Environment: BUILD_DIR (build), TPS ("1 2 4"), PORT (30340), SHAPE (act_bench shape flags,
# default GPT-2 small's width and heads at context 512, micro batch 4, with 2 layers: a layer's
# activations do not depend on how many there are), CHECK (a relative tolerance: exit 1 when a
# measurement is further than that from its formula; the test tp_activation_bytes sets it).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
TPS=${TPS:-"1 2 4"}
PORT=${PORT:-30340}
SHAPE=${SHAPE:-"--n-layer 2 --d-model 768 --n-head 12 --context 512 --micro 4"}
zerorun="$BUILD_DIR/bin/zerorun" bench="$BUILD_DIR/bin/act_bench"
for f in "$zerorun" "$bench"; do
  [ -x "$f" ] || { echo "activations.sh: $f not built (cmake --build $BUILD_DIR --target zerorun act_bench)" >&2; exit 2; }
done
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT

echo "One layer's activations per rank, bytes (GPT example: $SHAPE, fp32, dropout 0.1, no"
echo "checkpointing, one data rank, Gloo on $(nproc) cores; rank 0), against Megatron's formulas in fp32."
echo
echo "| tp | sequence parallel | measured MiB | formula MiB | measured / formula | vs tp 1 |"
echo "|---|---|---|---|---|---|"
base=""
for tp in $TPS; do
  for sp in no yes; do
    [ "$sp" = yes ] && [ "$tp" = 1 ] && continue
    flags=()
    [ "$sp" = yes ] && flags=(--sequence-parallel)
    log="$log_dir/tp${tp}_$sp.log"
    # shellcheck disable=SC2086
    "$zerorun" --nproc_per_node "$tp" --master_port "$PORT" --no_local_rank "$bench" \
      --data examples/gpt/data/kjv_genesis_exodus.txt --stage 0 --mode none --steps 2 --dropout 0.1 \
      --tp "$tp" "${flags[@]}" $SHAPE >"$log" 2>&1 || {
      echo "activations.sh: tp $tp (sequence parallel: $sp) failed; log:" >&2; tail -20 "$log" >&2; exit 1; }
    PORT=$((PORT + 1))
    row=$(CHECK=${CHECK:-} python3 - "$log" "$sp" "${base:-0}" <<'PY'
import json, os, sys
line = next(l for l in open(sys.argv[1]) if l.startswith('[rank 0] {"rank"'))
r = json.loads(line.split(" ", 2)[2])
s, b, h, a, t = r["context"], r["micro"], r["d_model"], r["heads"], r["tp"]
sbh = s * b * h
if sys.argv[2] == "yes":
    formula = 4 * sbh * (18 + 3 * a * s / h) / t
else:
    formula = 4 * sbh * (6 + 12 / t + 3 * a * s / (h * t))
measured = r["block_activation_bytes"]
base = int(sys.argv[3]) or measured
mib = 1024 * 1024
print(f"{measured} | {t} | {sys.argv[2]} | {measured / mib:.1f} | {formula / mib:.1f} | "
      f"{measured / formula:.3f} | {measured / base:.3f}x |")
if os.environ["CHECK"] and abs(measured / formula - 1) > float(os.environ["CHECK"]):
    sys.exit(3)
PY
)  || { echo "| ${row#* | }"; echo "activations.sh: tp $tp (sequence parallel: $sp): measured" \
         "and formula differ by more than CHECK=$CHECK" >&2; exit 1; }
    [ -z "$base" ] && base=${row%% *}
    echo "| ${row#* | }"
  done
done
