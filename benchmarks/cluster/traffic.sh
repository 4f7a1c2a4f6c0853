#!/usr/bin/env bash
# Bytes across the host links, measured: the example GPT on an emulated cluster of 2 hosts x 2
# ranks (tests/cluster/netns_cluster.sh: network namespaces, tbf-shaped links), ZeRO stages 0-3,
# at each link rate. Per step: the bytes the hosts sent over their links (the veth counters: each
# byte that crosses between hosts counted once, at its sender), from two runs of STEPS_A and
# STEPS_B steps (their difference cancels the rendezvous and the start), beside the formula of
# ring collectives over 4 ranks placed host by host, whose ring crosses between the hosts twice:
#   per step, 2 x (each rank's bytes sent) = 2 x f x (W - 1) / W x 4 bytes x parameters,
#   f = 2 at stage 0 (the gradients all-reduced),
#   f = 3 at stage 1 (our stage 1 all-reduces the gradients, keeping them whole, then
#       all-gathers the updated shards),
#   f = 2 at stage 2 (the gradients reduce-scattered, the updated shards all-gathered),
#   f = 3 at stage 3 (all-gathers in forward and in backward, a reduce-scatter; every parameter
#       gathered: stage3_param_persistence_threshold 0, stage3_max_reuse_distance 0),
#   at stage 3 with ZeRO++: hpZ (zero_hpz_partition_size 2, the ranks of a host) takes the
#       backward's gathers off the links (they read the secondary copies within the host): f = 2;
#       qwZ (zero_quantized_weights) sends each gather as int8, a quarter of fp32's bytes, and
#       one fp32 scale per block of 4000-8000 values (about 0.1% more, left out of the formula):
#       f = 1/4 + 1/4 + 1 = 1.5; both: f = 1/4 + 1 = 1.25; qgZ (zero_quantized_gradients)
#       reduce-scatters the gradients through all-to-alls within each host, then across: (H - 1)
#       x P values cross the links at half a byte each, with an fp32 scale per 256 and the V
#       values of 1-dimensional parameters (biases, norms) in fp32: (H - 1) (P / 2 + P / 64 + 4 V)
#       bytes in place of the reduce-scatter's pass;
#   MiCS (mics_shard_size 2, the ranks of a host): every gather and reduce-scatter stays within
#       its host; what crosses is the average of each gradient shard (P / 2 values) over the
#       R = W / 2 replicas at the step, a ring all-reduce over R hosts: each rank sends
#       2 (R - 1) / R x 4 bytes x P / 2, so 2 (R - 1) x 4 bytes x P over all W ranks.
# With hierarchical collectives (ZERO_HIERARCHICAL_ALLREDUCE=auto, the default across hosts:
# within the host, then across) each pass sends (H - 1) x 4 bytes x parameters across H hosts
# instead of the ring's H x (W - 1) / W x 4 bytes x parameters (2 N against 3 N at 2 x 2 for f = 2).
# CASES lists STAGE:MODE[:ZEROPP] items, MODE off (flat rings) or auto (hierarchical), ZEROPP
# features of hpz, qwz, qgz joined by +, or mics (stage 3 only).
# Root only (exits 77 otherwise, as the cluster script does). Environment: BUILD_DIR (build),
# RATES ("1000 200"), CASES ("0:off 0:auto ... 3:off 3:auto"), STEPS_A (2), STEPS_B (6),
# SHAPE (gpt_train shape flags, default "--n-layer 4 --d-model 256 --n-head 8 --context 64").
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
RATES=${RATES:-"1000 200"}
CASES=${CASES:-"0:off 0:auto 1:off 1:auto 2:off 2:auto 3:off 3:auto"}
STEPS_A=${STEPS_A:-2}
STEPS_B=${STEPS_B:-6}
SHAPE=${SHAPE:-"--n-layer 4 --d-model 256 --n-head 8 --context 64"}
source benchmarks/gpt_bins.sh
zerorun=$(realpath "$zerorun") train=$(realpath "$train")
export CLUSTER="tb$$"
CLUSTER=${CLUSTER:0:8}
cluster() { tests/cluster/netns_cluster.sh "$@"; }
log=$(mktemp)
trap 'cluster down; rm -f "$log"' EXIT
sent() { cluster bytes | awk '{ s += $2 } END { printf "%.0f\n", s }'; }  # what the hosts sent

# The gpt_train flags of a ZeRO++ feature.
zeropp_flags() {
  local feature
  for feature in ${1//+/ }; do
    case $feature in
      hpz) echo "--set zero_optimization.zero_hpz_partition_size=2" ;;
      qwz) echo "--set zero_optimization.zero_quantized_weights=true" ;;
      qgz) echo "--set zero_optimization.zero_quantized_gradients=true" ;;
      mics) echo "--set zero_optimization.mics_shard_size=2" ;;
      *) echo "traffic.sh: unknown ZeRO++ feature '$feature'" >&2; exit 2 ;;
    esac
  done
}

# One run of STEPS steps; prints "bytes_sent parameters vector_parameters ms_per_step".
run() {
  local stage=$1 mode=$2 steps=$3 zeropp=$4 before after
  before=$(sent)
  # shellcheck disable=SC2086
  GLOO_SOCKET_IFNAME=eth0 ZERO_HIERARCHICAL_ALLREDUCE=$mode cluster exec 0 "$zerorun" --hostfile "$dir/hostfile" \
    --master_addr 10.213.0.1 --master_port 30430 --ssh_port 22 --launcher_args "$(cat "$dir/ssh_args")" \
    "$train" --deepspeed_config "$PWD/examples/gpt/ds_config_stage1.json" $SHAPE --steps "$steps" \
    --data "$PWD/examples/gpt/data/kjv_genesis_exodus.txt" \
    --set zero_optimization.stage="$stage" --set zero_optimization.stage3_param_persistence_threshold=0 \
    --set zero_optimization.stage3_max_reuse_distance=0 $(zeropp_flags "$zeropp") --json_summary >"$log" 2>&1 ||
    { tail -20 "$log"; echo "traffic.sh: stage $stage failed" >&2; exit 1; }
  after=$(sent)
  python3 - "$log" $((after - before)) <<'PY'
import json, re, sys
line = next(l for l in open(sys.argv[1]) if re.match(r"\[rank 0\] \{\"first_loss\"", l))
s = json.loads(line.split("] ", 1)[1])
print(sys.argv[2], s["parameters"], s["vector_parameters"], s["ms_per_step"])
PY
}

echo "Bytes across the host links per step (example GPT: $SHAPE, micro batch 8, fp32 AdamW),"
echo "2 emulated hosts x 2 ranks, Gloo over TCP through tbf-shaped veth links, $(nproc) cores in all."
echo
echo "| link Mbit/s | ZeRO stage | collectives | ZeRO++ | MB across hosts per step | formula MB | measured / formula | within 10% | step ms |"
echo "|---|---|---|---|---|---|---|---|---|"
for rate in $RATES; do
  dir=$(cluster up 2 "$rate")
  sed -i 's/slots=1/slots=2/' "$dir/hostfile"
  for case in $CASES; do
    IFS=: read -r stage mode zeropp <<<"$case"
    read -r bytes_a params vectors _ < <(run "$stage" "$mode" "$STEPS_A" "$zeropp")
    read -r bytes_b _ _ ms < <(run "$stage" "$mode" "$STEPS_B" "$zeropp")
    python3 - "$rate" "$stage" "$mode" "$bytes_a" "$bytes_b" "$STEPS_A" "$STEPS_B" "$params" "$ms" "$zeropp" "$vectors" <<'PY'
import sys
rate, stage, mode, a, b, sa, sb, params, ms, zeropp, vectors = sys.argv[1:]
per_step = (int(b) - int(a)) / (int(sb) - int(sa))
w, h, n = 4, 2, 4 * int(params)
passes = {"0": 2, "1": 3, "2": 2, "3": 3}[stage]  # an all-reduce is 2
extra = 0  # bytes outside the passes
if stage == "3" and zeropp:
    features = zeropp.split("+")
    forward = 0.25 if "qwz" in features else 1  # int8 instead of fp32
    backward = 0 if "hpz" in features else forward  # hpZ: within the host
    passes = forward + backward + 1  # and the reduce-scatter
    if "mics" in features:  # only the replicas' all-reduce of the gradient shards crosses
        passes, extra = 0, 2 * (w // 2 - 1) * n
    elif "qgz" in features:
        passes -= 1
        p, v = int(params), int(vectors)
        extra = (h - 1) * (p / 2 + p / 64 + 4 * v)
per_pass = (h - 1) * n if mode == "auto" else h * (w - 1) / w * n
formula = passes * per_pass + extra
ratio = per_step / formula
print(f"| {rate} | {stage} | {'hierarchical' if mode == 'auto' else 'ring'} | {zeropp or '-'} | {per_step / 1e6:.2f} | "
      f"{formula / 1e6:.2f} | {ratio:.3f} | {'yes' if abs(ratio - 1) <= 0.1 else 'no'} | {float(ms):.1f} |")
PY
  done
  cluster down
done
