#!/usr/bin/env bash
# ZeRO stages 0-3 on the GPT example (bin/zerorun + bin/gpt_train, Gloo on loopback): step time
# relative to stage 0 and rank 0's model-state bytes against the ZeRO formula, as a table.
# Environment: BUILD_DIR (build), RANKS ("2 4"), STEPS (60), PORT (29950), EXTRA (gpt_train args),
# PRECISION (fp32 | bf16: the example's configs with "bf16": {"enabled": true} added).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
RANKS=${RANKS:-"2 4"}
STEPS=${STEPS:-60}
PORT=${PORT:-29950}
EXTRA=${EXTRA:-}
PRECISION=${PRECISION:-fp32}
case "$PRECISION" in fp32|bf16) ;; *) echo "run.sh: PRECISION must be fp32 or bf16" >&2; exit 2;; esac
source benchmarks/gpt_bins.sh
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT

# Runs one configuration; writes "psi step_ms model_states_bytes peak_gathered_bytes final_loss"
# to $log_dir/result.
run_one() {
  local ranks=$1 stage=$2 port=$3 log="$log_dir/r$1_s$2.log"
  local config="examples/gpt/ds_config_stage$stage.json"
  if [ "$PRECISION" = bf16 ]; then
    sed '1a "bf16": {"enabled": true},' "$config" >"$log_dir/config.json"
    config="$log_dir/config.json"
  fi
  # shellcheck disable=SC2086
  "$zerorun" --nproc_per_node "$ranks" --master_port "$port" "$train" \
    --deepspeed_config "$config" --steps "$STEPS" $EXTRA >"$log" 2>&1 || {
    echo "run.sh: stage $stage on $ranks ranks failed; log:" >&2; tail -20 "$log" >&2; exit 1; }
  awk '
    { sub(/^\[rank [0-9]+\] /, "") }  # zerorun prefixes each line with its rank
    /gpt_train: [0-9]+ parameters/ { for (i = 1; i <= NF; ++i) if ($(i + 1) == "parameters") psi = $i }
    /sequences per step/ { for (i = 1; i <= NF; ++i) if ($i == "=") batch = $(i + 1) }
    # The engine'\''s progress line: "step=N, skipped=0, lr=[..] ..., loss=X, ..., samples/s=Y, ..."
    function field(name) {
      if (match($0, name "=[0-9.e+-]+")) return substr($0, RSTART + length(name) + 1, RLENGTH - length(name) - 1)
      return ""
    }
    /step=[0-9]+, skipped=/ {
      n += 1; loss = field("loss"); sps = field("samples/s"); mib = field("model_states")
      if (field("peak_gathered") != "") peak = field("peak_gathered")
      if (n > 1) { sum += sps; cnt += 1 }   # skip the first interval (start-up)
    }
    END {
      if (!cnt) { print "no timing lines" > "/dev/stderr"; exit 1 }
      printf "%d %.2f %.0f %.0f %s\n", psi, 1000 * batch / (sum / cnt), mib * 1048576, peak * 1048576, loss
    }' "$log" >"$log_dir/result"
}

# ZeRO paper, Adam, bytes per rank (docs/design.md): fp32 params+grads+moments 4+4+8 (the
# params are the master); bf16 params+grads 2+2, fp32 master + moments 12 for the shard (stage
# 0: fp32 gradients, DeepSpeed's default without ZeRO).
formula() {
  awk -v s="$1" -v p="$2" -v n="$3" -v prec="$PRECISION" 'BEGIN {
    if (prec == "bf16") {
      if (s == 0) b = 18 * p; else if (s == 1) b = 4 * p + 12 * p / n
      else if (s == 2) b = 2 * p + 14 * p / n; else b = 16 * p / n
    } else {
      if (s == 0) b = 16 * p; else if (s == 1) b = 8 * p + 8 * p / n
      else if (s == 2) b = 4 * p + 12 * p / n; else b = 16 * p / n
    }
    printf "%.0f", b }'
}

echo "GPT example, $STEPS steps, $PRECISION, Gloo over loopback on $(nproc) cores; model states of rank 0."
echo
echo "| ranks | stage | step ms | vs stage 0 | model states MiB | ZeRO $PRECISION formula MiB | ratio | stage 3 peak gathered MiB | loss at step $STEPS |"
echo "|---|---|---|---|---|---|---|---|---|"
for ranks in $RANKS; do
  base=""
  for stage in 0 1 2 3; do
    run_one "$ranks" "$stage" "$PORT"
    PORT=$((PORT + 1))
    read -r psi step_ms bytes peak loss <"$log_dir/result"
    [ -n "$base" ] || base=$step_ms
    want=$(formula "$stage" "$psi" "$ranks")
    awk -v r="$ranks" -v s="$stage" -v t="$step_ms" -v b0="$base" -v got="$bytes" -v want="$want" \
        -v peak="$peak" -v loss="$loss" 'BEGIN {
      printf "| %d | %d | %.1f | %.2fx | %.3f | %.3f | %.3f | %s | %s |\n", r, s, t, t / b0, got / 1048576,
             want / 1048576, got / want, (s == 3 ? sprintf("%.3f", peak / 1048576) : "-"), loss }'
  done
done
