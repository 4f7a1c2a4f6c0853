#!/usr/bin/env bash
# zerorun_bench_comm.sh BIN_DIR PORT: `zerorun --nproc_per_node 4 zero bench comm` as its help
# shows it (zerorun appends --local_rank=N to every rank's arguments and prefixes lines with [rank R]), with short sizes; then
# `zero` with --local_rank in both forms, before and after the command words.
set -euo pipefail
bin=$1; port=$2
export PATH="$bin:$PATH"
out=$(zerorun --nproc_per_node 4 --master_port "$port" zero bench comm --sizes 4K,64K --iters 2 --warmup 1 2>&1)
echo "$out"
for op in all_reduce reduce_scatter all_gather broadcast; do
  echo "$out" | grep -qE "^(\[rank 0\] )?# $op  backend gloo  world 4 " || { echo "FAIL: no $op table"; exit 1; }
done
[ "$(echo "$out" | grep -cE '^(\[rank 0\])? +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$')" -eq 8 ] || { echo "FAIL: expected 8 result rows"; exit 1; }
echo "$out" | grep -q "unknown" && { echo "FAIL: an argument was rejected"; exit 1; }
zero --local_rank 3 --help | grep -q "usage: zero COMMAND" || { echo "FAIL: --local_rank N before the command"; exit 1; }
zero config --local_rank=0 --help 2>&1 | grep -q "unknown" && { echo "FAIL: --local_rank=N after the command"; exit 1; }
if zero --local_rank=x --help 2>/dev/null; then echo "FAIL: --local_rank=x accepted"; exit 1; fi
echo "PASS"
