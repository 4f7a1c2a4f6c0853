#!/usr/bin/env bash
# The job token at the rendezvous: job_token.sh ZERORUN JOIN_PROG PORT (uses PORT..PORT+2).
# zerorun's jobs carry a token; a rank of another job, or one without the token, is refused
# with an error on its side and a warning on rank 0's; two zerorun jobs on one port stay apart.
set -uo pipefail
zerorun=$1; prog=$2; port=$3
failed=0
fail() { echo "FAIL: $*"; failed=1; }
expect() { grep -q -- "$2" <<<"$1" || fail "$3: output lacks '$2'"; }
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$dir"; }
trap cleanup EXIT
export ZERO_TIMEOUT=60 OMP_NUM_THREADS=1
unset ZERO_JOB_TOKEN
token_a=aaaaaaaaaaaaaaaa1111111111111111
token_b=bbbbbbbbbbbbbbbb2222222222222222

# 1. zerorun gives its ranks a token; they join.
out=$("$zerorun" --nproc_per_node 2 --master_port "$port" "$prog" 2>&1) || fail "zerorun job failed"
echo "$out"
expect "$out" "joined: rank 1 of 2, sum 2, token set" "zerorun job"

# 2. Rank 0 of job A waits; a rank 1 with job B's token and one without a token are refused;
# then A's own rank 1 joins and rank 0 reports the refused ones.
p=$((port + 1))
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p ZERO_JOB_TOKEN=$token_a \
  "$prog" >"$dir/a0.out" 2>&1 &
a0=$!; pids+=("$a0")
out=$(RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p ZERO_JOB_TOKEN=$token_b timeout 60 "$prog" 2>&1)
rc=$?; echo "other job's rank: $out"
[ $rc -eq 1 ] || fail "a rank with another job's token exited $rc, not 1"
expect "$out" "belongs to another job" "other job's rank"
expect "$out" "differs from this process's ZERO_JOB_TOKEN" "other job's rank"
out=$(RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p timeout 60 "$prog" 2>&1)
rc=$?; echo "rank without token: $out"
[ $rc -eq 1 ] || fail "a rank without a token exited $rc, not 1"
expect "$out" "this process has none" "rank without token"
out=$(RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p ZERO_JOB_TOKEN=$token_a timeout 60 "$prog" 2>&1)
rc=$?; echo "job A's rank 1: $out"
[ $rc -eq 0 ] || fail "job A's own rank 1 exited $rc"
wait "$a0" || fail "job A's rank 0 failed"
cat "$dir/a0.out"
expect "$(cat "$dir/a0.out")" "refused 2 process(es) of another job" "job A's rank 0"
expect "$(cat "$dir/a0.out")" "joined: rank 0 of 2, sum 2" "job A's rank 0"

# 3. Two zerorun jobs on one port: the second fails clearly, the first is unaffected.
p=$((port + 2))
HOLD_FILE=$dir/release "$zerorun" --nproc_per_node 2 --master_port "$p" "$prog" >"$dir/first.out" 2>&1 &
first=$!; pids+=("$first")
for _ in $(seq 600); do grep -q "joined: rank 1" "$dir/first.out" && break; sleep 0.1; done
out=$(timeout 60 "$zerorun" --nproc_per_node 2 --master_port "$p" "$prog" 2>&1)
rc=$?; echo "second job: $out"
[ $rc -ne 0 ] || fail "a second job on the first job's port succeeded"
grep -q -e "belongs to another job" -e "cannot host the rendezvous store" <<<"$out" ||
  fail "second job: no clear error"
touch "$dir/release"
wait "$first" || fail "the first job failed"
cat "$dir/first.out"
expect "$(cat "$dir/first.out")" "after hold: rank 1, sum 2" "first job"

[ $failed -eq 0 ] && echo "job token: all checks passed"
exit $failed
