#!/usr/bin/env bash
# zerorun_bench_comm.sh BIN_DIR PORT: `zerorun --nproc_per_node 4 zero bench comm` as its help
# shows it (zerorun appends --local_rank=N to every rank's arguments and prefixes lines with [rank R]), with short sizes; then
# `zero` with --local_rank in both forms, before and after the command words.
# grep reads here-strings, not pipes: with pipefail, grep -q leaving early can fail the echo
# that feeds it (SIGPIPE) and so the check.
set -euo pipefail
bin=$1; port=$2
export PATH="$bin:$PATH"
out=$(zerorun --nproc_per_node 4 --master_port "$port" zero bench comm --sizes 4K,64K --iters 2 --warmup 1 2>&1)
echo "$out"
for op in all_reduce reduce_scatter all_gather broadcast; do
  grep -qE "^(\[rank 0\] )?# $op  backend gloo  world 4 " <<<"$out" || { echo "FAIL: no $op table"; exit 1; }
done
# The ranks share this host: every size through shared memory and through Gloo's TCP.
for transport in shm tcp; do
  [ "$(grep -cE "^(\[rank 0\])? +[0-9]+ +$transport +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" <<<"$out")" -eq 8 ] ||
    { echo "FAIL: expected 8 $transport result rows (size, transport, time, algbw, busbw, memcpy)"; exit 1; }
done
grep -q "unknown" <<<"$out" && { echo "FAIL: an argument was rejected"; exit 1; }
grep -q "usage: zero COMMAND" <<<"$(zero --local_rank 3 --help)" || { echo "FAIL: --local_rank N before the command"; exit 1; }
grep -q "unknown" <<<"$(zero config --local_rank=0 --help 2>&1)" && { echo "FAIL: --local_rank=N after the command"; exit 1; }
if zero --local_rank=x --help 2>/dev/null; then echo "FAIL: --local_rank=x accepted"; exit 1; fi
echo "PASS"
