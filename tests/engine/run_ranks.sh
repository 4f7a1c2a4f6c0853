#!/usr/bin/env bash
# Fallback launcher when zerorun is not built: run_ranks.sh N PORT program args...
# Starts N ranks on loopback with env:// variables; fails if any rank fails.
set -u
n=$1; port=$2; shift 2
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
exit $rc
