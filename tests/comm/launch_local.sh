#!/usr/bin/env bash
# Starts N local ranks with env:// variables (a stand-in for zerorun in the comm tests when the
# launcher is not built); exits with the first non-zero rank status and kills the rest.
set -u
n=$1 port=$2
shift 2
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  pids+=($!)
done
status=0
remaining=$n
while ((remaining > 0)); do
  wait -n -p done_pid; rc=$?
  ((remaining--))
  if ((rc != 0 && status == 0)); then
    status=$rc
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  fi
done
exit $status
