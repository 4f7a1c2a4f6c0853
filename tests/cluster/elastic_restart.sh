#!/usr/bin/env bash
# Elastic restarts across emulated hosts (netns_cluster.sh, 2 hosts x 2 ranks): the elastic
# worker (global batch 16, a checkpoint every 2 steps, zero::DistributedSampler) under
# zerorun --max_restarts 2.
#  A. Every process of host 1 (its sshd too) is killed at a random moment after the first
#     checkpoint: zerorun drops host 1 (it no longer answers ssh) and relaunches on host 0 alone;
#     the 2 ranks resume from the latest checkpoint with twice the accumulation steps.
#  B. The reverse: host 1's sshd is down at the start (its launch fails: dropped, the job runs on
#     host 0); after the first checkpoint its sshd comes back and a rank of host 0 is killed: at
#     the restart host 1 answers again and the job goes on over 4 ranks with half the
#     accumulation.
# Each finishes (exit 0) with parameters equal to an uninterrupted 4-rank run's to 1e-5, every
# step trained on that run's samples (elastic_samples.py), no process of the job left.
#  C. With --min_nodes 2, losing host 1 ends the job with the failure's exit code.
# usage: elastic_restart.sh ZERORUN ELASTIC_WORKER MASTER_PORT   (exit 77: no namespaces here)
set -u
ZERORUN=$(realpath "$1") WORKER=$(realpath "$2") MASTER_PORT=$3
here=$(cd "$(dirname "$0")" && pwd)
samples_check="$here/../engine/elastic_samples.py"
export CLUSTER="e$$"
CLUSTER=${CLUSTER:0:8}
cluster() { "$here/netns_cluster.sh" "$@"; }
fail() { echo "FAILED: $*"; exit 1; }
tmp=$(mktemp -d /tmp/zero_elastic_test_XXXXXX)
trap 'cluster down; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
steps=14

dir=$(cluster up 2 1000)
rc=$?
[ $rc -eq 77 ] && { echo "SKIPPED: the emulated cluster cannot be built here"; exit 77; }
[ $rc -eq 0 ] || fail "netns_cluster.sh up exited $rc"
printf '10.213.0.1 slots=2\n10.213.0.2 slots=2\n' >"$tmp/hosts"
# zerorun from host 0 with restarts (and any more zerorun flags); output in $tmp/out_<name>.
run() {
  local name=$1
  shift
  mkdir -p "$tmp/$name"
  GLOO_SOCKET_IFNAME=eth0 cluster exec 0 timeout 150 "$ZERORUN" --hostfile "$tmp/hosts" \
    --master_addr 10.213.0.1 --master_port "$MASTER_PORT" --ssh_port 22 \
    --launcher_args "$(cat "$dir/ssh_args")" --grace_period 2 --max_restarts 2 "$@" --no_local_rank \
    "$WORKER" "$tmp/$name" "$steps" 150 >"$tmp/out_$name" 2>&1
}
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$s" ] && [[ $s != Z* ]]; }
wait_for() {  # wait_for FILE: up to 60 s
  for _ in $(seq 600); do [ -e "$1" ] && return 0; sleep 0.1; done
  return 1
}
check_run() {  # check_run NAME: finished like the uninterrupted run, nothing left behind
  local name=$1 left=""
  "$WORKER" --compare "$tmp/$name/final.pt" "$tmp/ref/final.pt" 1e-5 ||
    fail "$name: the parameters differ from the uninterrupted run's"
  python3 "$samples_check" "$tmp/ref" "$tmp/$name" "$steps" || fail "$name: the samples differ"
  for _ in $(seq 50); do
    left=""
    for f in "$tmp/$name"/pid_*; do alive "$(cat "$f")" && left="$left $(cat "$f")"; done
    [ -z "$left" ] && break
    sleep 0.1
  done
  [ -z "$left" ] || fail "$name: processes of the job remain:$left"
}

# The uninterrupted run: 4 ranks on this machine.
mkdir -p "$tmp/ref"
"$ZERORUN" --nproc_per_node 4 --master_port "$MASTER_PORT" --no_local_rank "$WORKER" "$tmp/ref" \
  "$steps" 0 >"$tmp/out_ref" 2>&1 || { cat "$tmp/out_ref"; fail "the uninterrupted run"; }

# A. Host 1 lost after the first checkpoint.
run a &
job=$!
wait_for "$tmp/a/ckpt/latest" || { cat "$tmp/out_a"; fail "A: no checkpoint"; }
sleep "0.$((RANDOM % 5))"
kill -9 $(ip netns pids "zc-$CLUSTER-h1")
start=$(date +%s.%N)
for _ in $(seq 600); do grep -q "restart 1, 2 ranks" "$tmp/out_a" && break; sleep 0.05; done
back=$(date +%s.%N)
wait "$job"
rc=$?
[ $rc -eq 0 ] || { cat "$tmp/out_a"; fail "A: the job ended with $rc after losing host 1"; }
grep -q "hosts dropped: 10.213.0.2" "$tmp/out_a" && grep -q "restart 1: 2 ranks on 1 host(s)" "$tmp/out_a" ||
  { cat "$tmp/out_a"; fail "A: host 1 was not dropped"; }
resumed=$(grep -o "restart 1, 2 ranks, micro 4 x 2 accumulation, from step [0-9]*" "$tmp/out_a") ||
  { cat "$tmp/out_a"; fail "A: the restart did not resume on 2 ranks with twice the accumulation"; }
check_run a
lost=$(python3 "$samples_check" "$tmp/ref" "$tmp/a" "$steps" | grep -o "[0-9]* step(s) trained again")
echo "A. host 1 lost: ${resumed#restart 1, } ($lost); equal to the uninterrupted run;" \
  "$(python3 -c "print(f'{$back - $start:.2f}')") s from the kill to the resumed ranks' first step"

# B. Host 1 (its sshd still down since A) joins at a restart.
run b &
job=$!
wait_for "$tmp/b/ckpt/latest" || { cat "$tmp/out_b"; fail "B: no checkpoint on host 0 alone"; }
grep -q "restart 1: 2 ranks on 1 host(s)" "$tmp/out_b" || { cat "$tmp/out_b"; fail "B: host 1 not dropped"; }
cluster exec 1 /usr/sbin/sshd -D -e -f "$dir/sshd_1.conf" >>"$dir/sshd_1.log" 2>&1 </dev/null &
for _ in $(seq 50); do
  # shellcheck disable=SC2046
  cluster exec 0 ssh $(cat "$dir/ssh_args") 10.213.0.2 true 2>/dev/null && break
  sleep 0.1
done
kill -9 "$(cat "$tmp/b/pid_1_1")"
wait "$job"
rc=$?
[ $rc -eq 0 ] || { cat "$tmp/out_b"; fail "B: the job ended with $rc"; }
grep -q "host 10.213.0.2 answers again; it rejoins the job" "$tmp/out_b" &&
  grep -q "restart 2: 4 ranks on 2 host(s)" "$tmp/out_b" || { cat "$tmp/out_b"; fail "B: host 1 did not rejoin"; }
resumed=$(grep -o "restart 2, 4 ranks, micro 4 x 1 accumulation, from step [0-9]*" "$tmp/out_b") ||
  { cat "$tmp/out_b"; fail "B: the restart did not resume on 4 ranks"; }
check_run b
echo "B. host 1 joins at a restart: ${resumed#restart 2, }; equal to the uninterrupted run"
# C. --min_nodes 2: losing host 1 (up again since B) ends the job with the failure's code.
run c --min_nodes 2 &
job=$!
wait_for "$tmp/c/ckpt/latest" || { cat "$tmp/out_c"; fail "C: no checkpoint"; }
kill -9 $(ip netns pids "zc-$CLUSTER-h1")
wait "$job"
rc=$?
[ $rc -ne 0 ] && grep -q "1 host(s) left, fewer than --min_nodes 2; exiting with the first failure's code $rc" "$tmp/out_c" ||
  { cat "$tmp/out_c"; fail "C: exit $rc, not the failure's code after fewer than --min_nodes hosts"; }
echo "C. --min_nodes 2 and host 1 lost: the job ends with the failure's code $rc"
echo "elastic restart: passed"
