#!/usr/bin/env bash
# checkpoint_crash.sh ZERORUN WORKER FIRST_PORT TRIALS: kills one rank of a 2-rank job with
# SIGKILL at a random moment while it saves checkpoints in a loop, TRIALS times (each its own
# job and directory, ports FIRST_PORT...); checks no process outlives its job and that kills land
# while a save is in flight (its temporary directory exists); then one job loads
# every trial's `latest` and resumes it bit-exact (checkpoint_worker --suite crash_check).
set -euo pipefail
zerorun=$1 worker=$2 port=$3 trials=$4
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_ckpt_crash.XXXXXX")
trap 'rm -rf "$dir"' EXIT
export OMP_NUM_THREADS=1
all=()
inside=0  # trials whose kill came while a save's temporary directory existed
for ((i = 1; i <= trials; i++)); do
  d=$dir/trial$i
  mkdir -p "$d"
  ZERO_TEST_CKPT_DIR=$d "$zerorun" --nproc_per_node 2 --master_port $((port + i)) --no_local_rank \
    "$worker" --suite crash_save >"$d.log" 2>&1 &
  job=$!
  for _ in $(seq 1 1200); do
    grep -q "saving in a loop" "$d.log" && break
    kill -0 $job 2>/dev/null || { cat "$d.log"; echo "trial $i: the job ended early"; exit 1; }
    sleep 0.05
  done
  delay_ms=$((RANDOM % 400))
  sleep "$(printf '0.%03d' $delay_ms)"
  # A rank: a child of zerorun running the worker itself (zerorun's guard process is not one).
  victim=$(for p in $(pgrep -P $job); do
    [ "$(readlink -f /proc/$p/exe)" = "$(readlink -f "$worker")" ] && echo "$p"
  done | shuf -n 1)
  [ -n "$victim" ] || { cat "$d.log"; echo "trial $i: no rank process found"; exit 1; }
  # A save in flight right now has its temporary directory (tag.tmp-NONCE) beside the tags.
  inflight=$(ls "$d" | grep -c '\.tmp-' || true)
  kill -KILL "$victim"
  [ "$inflight" -gt 0 ] && inside=$((inside + 1))
  if wait $job; then echo "trial $i: the job survived the kill"; exit 1; fi
  if pgrep -f "$d" >/dev/null || pgrep -P $job >/dev/null; then
    echo "trial $i: processes outlived the job"; exit 1
  fi
  left=$(ls "$d" | grep -c '\.tmp-' || true)
  echo "trial $i: killed rank pid $victim after ${delay_ms} ms, a save in flight: $([ "$inflight" -gt 0 ] && echo yes || echo no); latest=$(cat "$d/latest"); $left temporary dir(s) left by the crash"
  all+=("$d")
done
echo "$inside of $trials kills landed while a save was in flight"
# The loop does little but save, so most kills land inside one; none would mean the test no
# longer tests a crash during a write.
[ "$inside" -gt 0 ] || { echo "no kill landed inside a save"; exit 1; }
ZERO_TEST_TRIALS="${all[*]}" "$zerorun" --nproc_per_node 2 --master_port $((port + trials + 1)) \
  --no_local_rank "$worker" --suite crash_check
