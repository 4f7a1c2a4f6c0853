#!/usr/bin/env bash
# elastic_local.sh ZERORUN ELASTIC_WORKER PORT: zerorun --max_restarts on one machine, and an
# elastic job resumed at another world size, with processes standing for hosts.
#  1. --max_restarts 0: a failing rank ends the job with its code, as without the flag.
#  2. --max_restarts 2 with a rank failing every time (codes 3, 4, 5): two restarts, then the
#     first failure's code; the ranks saw ZERO_RESTART_COUNT 0, 1, 2.
#  3. --max_restarts 1 with a rank failing once: the restart finishes the job (exit 0).
#  4. The elastic worker (global batch 16) saves every 2 steps on 4 ranks and stops at step 5;
#     restarted on 2 ranks (ZERO_RESTART_COUNT=1, twice the accumulation) it resumes from step 4
#     and finishes: its parameters equal an uninterrupted 4-rank run's to 1e-5 and every step
#     trained on the uninterrupted run's samples.
set -euo pipefail
zerorun=$1 worker=$2 port=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zero_elastic_local.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAILED: $*"; exit 1; }
z() { "$zerorun" --master_port "$port" --no_local_rank "$@"; }

# 1.
rc=0
z --nproc_per_node 2 --max_restarts 0 bash -c '[ "$RANK" != 1 ] || exit 3; sleep 0.2' \
  >"$tmp/out1" 2>&1 || rc=$?
[ $rc -eq 3 ] || { cat "$tmp/out1"; fail "max_restarts 0: exit $rc, expected 3"; }
! grep -q "restart" "$tmp/out1" || { cat "$tmp/out1"; fail "max_restarts 0 restarted"; }
echo "max_restarts 0: the failing rank's code 3, no restart"

# 2.
rc=0
z --nproc_per_node 2 --max_restarts 2 bash -c \
  'echo "count $ZERO_RESTART_COUNT"; [ "$RANK" != 1 ] || exit $((3 + ZERO_RESTART_COUNT)); sleep 0.2' \
  >"$tmp/out2" 2>&1 || rc=$?
[ $rc -eq 3 ] || { cat "$tmp/out2"; fail "repeated failures: exit $rc, expected the first code 3"; }
[ "$(grep -c "^zerorun: restart [0-9] of 2 after exit code" "$tmp/out2")" -eq 2 ] ||
  { cat "$tmp/out2"; fail "repeated failures: not 2 restarts"; }
for n in 0 1 2; do
  grep -q "^\[rank 1\] count $n$" "$tmp/out2" || { cat "$tmp/out2"; fail "no launch with count $n"; }
done
echo "repeated failures (3, 4, 5): 2 restarts, then exit 3 (the first failure's code)"

# 3.
z --nproc_per_node 2 --max_restarts 1 bash -c \
  '[ "$RANK$ZERO_RESTART_COUNT" != 10 ] || exit 7; echo "done $ZERO_RESTART_COUNT"' \
  >"$tmp/out3" 2>&1 || { cat "$tmp/out3"; fail "a failure followed by a good restart did not end well"; }
grep -q "^\[rank 1\] done 1$" "$tmp/out3" || { cat "$tmp/out3"; fail "no second launch"; }
echo "one failure, one restart: exit 0"

# 4.
mkdir -p "$tmp/ref" "$tmp/run"
z --nproc_per_node 4 "$worker" "$tmp/ref" 14 0 >"$tmp/out4" 2>&1 || { cat "$tmp/out4"; fail "reference run"; }
z --nproc_per_node 4 "$worker" "$tmp/run" 5 0 >"$tmp/out5" 2>&1 || { cat "$tmp/out5"; fail "first run"; }
ZERO_RESTART_COUNT=1 z --nproc_per_node 2 "$worker" "$tmp/run" 14 0 >"$tmp/out6" 2>&1 ||
  { cat "$tmp/out6"; fail "restarted run"; }
grep -q "restart 1, 2 ranks, micro 4 x 2 accumulation, from step 4" "$tmp/out6" ||
  { cat "$tmp/out6"; fail "the restart did not resume at step 4 with twice the accumulation"; }
"$worker" --compare "$tmp/run/final.pt" "$tmp/ref/final.pt" 1e-5 ||
  fail "the resumed run's parameters differ from the uninterrupted run's"
python3 "$here/elastic_samples.py" "$tmp/ref" "$tmp/run" 14 || fail "samples differ"
echo "elastic local: passed"
