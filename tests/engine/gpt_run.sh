# Sourced by gpt_tp_check.sh and gpt_pp_check.sh: gpt_run NAME WORLD ARGS... runs gpt_train on
# WORLD ranks with the caller's $config, $steps (or RUN_STEPS) and ARGS plus --json_summary,
# keeps its log in $tmp/NAME.log and its summary line in $tmp/NAME.json, and moves to the next of
# the caller's ports ($port up to $last_port); a failure prints the log and exits.
gpt_run() {
  local name=$1 world=$2 log=$tmp/$1.log
  shift 2
  ((port <= last_port)) || { echo "FAIL: more runs than the ports this test owns"; exit 1; }
  if ! "$zerorun" --nproc_per_node "$world" --master_port "$port" "$train" \
      --deepspeed_config "$config" --steps "${RUN_STEPS:-$steps}" --json_summary "$@" >"$log" 2>&1; then
    cat "$log"
    echo "FAIL: $name (world $world: $*) exited non-zero"
    exit 1
  fi
  grep -o '{"first_loss".*' "$log" | tail -1 >"$tmp/$name.json"
  [ -s "$tmp/$name.json" ] || { cat "$log"; echo "FAIL: $name printed no summary"; exit 1; }
  port=$((port + 1))
}
