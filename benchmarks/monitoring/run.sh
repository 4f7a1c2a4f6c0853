#!/usr/bin/env bash
# The cost of watching a run: the example GPT (bin/zerorun + bin/gpt_train, 2 ranks, Gloo) with
# every monitor, timer and logger on (csv_monitor, tensorboard, wall_clock_breakdown,
# comms_logger, flops_profiler at step 2) against all off, runs alternated, as a markdown table
# of the median ms per step (gpt_train --json_summary: the steps after the first).
# Environment: BUILD_DIR (build), STAGE (2), STEPS (60), REPEATS (5), PORT (30110), EXTRA
# (gpt_train args).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${BUILD_DIR:=build}" "${STAGE:=2}" "${STEPS:=60}" "${REPEATS:=5}" "${PORT:=30110}" "${EXTRA:=}"
source benchmarks/gpt_bins.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

/usr/bin/python3 - "examples/gpt/ds_config_stage$STAGE.json" "$tmp" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
off = dict(base)
for key in ("csv_monitor", "tensorboard", "comms_logger", "flops_profiler"):
    off[key] = {"enabled": False}
off["wall_clock_breakdown"] = False
on = dict(base)
on["csv_monitor"] = {"enabled": True, "output_path": sys.argv[2] + "/csv", "job_name": "on"}
on["tensorboard"] = {"enabled": True, "output_path": sys.argv[2] + "/tb", "job_name": "on"}
on["wall_clock_breakdown"] = True
on["comms_logger"] = {"enabled": True, "prof_all": True}
on["flops_profiler"] = {"enabled": True, "profile_step": 2,
                        "output_file": sys.argv[2] + "/flops.txt"}
json.dump(off, open(sys.argv[2] + "/off.json", "w"), indent=2)
json.dump(on, open(sys.argv[2] + "/on.json", "w"), indent=2)
PY

run() {  # run CONFIG -> ms per step
  local log="$tmp/log"
  # shellcheck disable=SC2086
  "$zerorun" --nproc_per_node 2 --master_port "$PORT" "$train" --deepspeed_config "$1" \
    --steps "$STEPS" --json_summary $EXTRA >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
  PORT=$((PORT + 1))
  grep -oP '"ms_per_step": \K[0-9.]+' "$log" | tail -1
}

off=() on=()
for ((r = 0; r < REPEATS; ++r)); do
  off+=("$(run "$tmp/off.json")")
  on+=("$(run "$tmp/on.json")")
  rm -rf "$tmp/csv" "$tmp/tb"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
m_off=$(median "${off[@]}")
m_on=$(median "${on[@]}")
range() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s-%s", lo, hi }'; }
echo "GPT example, ZeRO stage $STAGE, 2 ranks, $STEPS steps, $REPEATS alternated runs each; ms per step: median (min-max)."
echo "every run, off: ${off[*]}"
echo "every run, on:  ${on[*]}"
echo
echo "| stage | runs each | all off ms/step | all on ms/step | on / off |"
echo "|---|---|---|---|---|"
echo "| $STAGE | $REPEATS | $m_off ($(range "${off[@]}")) | $m_on ($(range "${on[@]}")) | $(awk -v a="$m_on" -v b="$m_off" 'BEGIN { printf "%.3f", a / b }') |"
