#!/usr/bin/env bash
# shm_faults.sh COMM_WORKER PORT: the shared-memory transport's faults, with real processes.
#  1. A rank SIGKILLed in the middle of an all-reduce: the others fail within seconds (not at the
#     60 s timeout) naming it; no segment is left in /dev/shm.
#  2. A segment left by a creator that died before removing its name is removed by the next job;
#     one whose creator is alive stays.
#  3. Ranks on different hosts (CROSS_RANK) use TCP under auto; ZERO_COMM_TRANSPORT=shm refuses
#     them with the reason.
# Ranks are started here, not by zerorun, so that nothing tears the survivors down early.
set -u
worker=$1 port=$2
uid=$(id -u)
tmp=$(mktemp -d)
sh -c 'exit 0' & dead=$!
wait "$dead"
orphan=/dev/shm/zero-shm-$uid-$dead-9 live=/dev/shm/zero-shm-$uid-$$-9
cleanup() { rm -rf "$tmp"; rm -f "$orphan" "$live"; }
trap cleanup EXIT
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; else echo "ok: $2"; fi; }

# start N PORT ENV... -- ARGS: ranks in the background, logs in $tmp/rank<r>.log, pids in $pids.
start() {
  local n=$1 p=$2
  shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  pids=()
  for ((r = 0; r < n; r++)); do
    env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
      "${envs[@]/\{rank\}/$r}" timeout -k 5 60 "$worker" "$@" >"$tmp/rank$r.log" 2>&1 &
    pids+=($!)
  done
}
# finish: waits for every rank; statuses in $codes.
finish() {
  codes=()
  for p in "${pids[@]}"; do wait "$p"; codes+=($?); done
}

touch "$orphan" "$live"
chmod 600 "$orphan" "$live"

echo "== 1. a rank killed mid-collective (3 ranks, rank 1 dies)"
t0=$(date +%s)
start 3 "$port" ZERO_COMM_TRANSPORT=auto -- peer-dies --victim 1
finish
elapsed=$(($(date +%s) - t0))
cat "$tmp"/rank*.log
echo "exit statuses: ${codes[*]} after ${elapsed}s"
check '[ "${codes[1]}" = 137 ]' "rank 1 was killed (137)"
for r in 0 2; do
  check '[ "${codes[$r]}" = 1 ]' "rank $r failed"
  check 'grep -qE "rank $r: transport shm" "$tmp/rank$r.log"' "rank $r used shared memory"
  check 'grep -qE "all_reduce \(seq [0-9]+, 4194304 bytes, group '"'"'zero/world'"'"', rank $r of 3\) failed: the process of rank 1 exited while this rank waited for it in shared memory" "$tmp/rank$r.log"' \
    "rank $r names rank 1"
done
check '((elapsed < 20))' "the survivors ended within 20 s (timeout 60 s)"

echo "== 2. leftover segments"
check '[ ! -e "$orphan" ]' "the dead creator's segment was removed"
check '[ -e "$live" ]' "the live creator's segment stayed"
for f in /dev/shm/zero-shm-"$uid"-*; do
  [ -e "$f" ] || continue
  pid=$(basename "$f" | cut -d- -f4)
  check 'kill -0 "$pid" 2>/dev/null' "$f belongs to a running process"
done

echo "== 3. ranks on two hosts"
start 2 $((port + 1)) CROSS_RANK={rank} -- collectives --transport tcp
finish
check '[ "${codes[*]}" = "0 0" ]' "auto across hosts runs over TCP"
cat "$tmp/rank0.log" | tail -2
start 2 $((port + 2)) CROSS_RANK={rank} ZERO_COMM_TRANSPORT=shm -- collectives
finish
cat "$tmp/rank0.log" | tail -2
check 'grep -q "ZERO_COMM_TRANSPORT=shm: group '"'"'zero/world'"'"' (2 ranks) spans hosts; shared memory serves ranks of one host" "$tmp/rank0.log"' \
  "shm demanded across hosts is refused with the reason"
check '[ "${codes[0]}" != 0 ] && [ "${codes[1]}" != 0 ]' "both ranks failed"

exit $fail
