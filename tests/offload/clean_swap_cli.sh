#!/usr/bin/env bash
# clean_swap_cli.sh ZERO: `zero clean-swap` removes a job dir whose owner is dead, keeps one of a
# live process and a directory that is not a swap dir; --help and a missing PATH behave.
set -euo pipefail
zero=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_clean_swap.XXXXXX")
sleep 60 & live=$!
trap 'kill $live 2>/dev/null || true; rm -rf "$dir"' EXIT
true & dead=$!
wait $dead
boot=$(cat /proc/sys/kernel/random/boot_id)
plant() {  # plant JOB PID
  mkdir -p "$dir/$1/rank0"
  printf 'host %s\npid %s\nstart 0\nboot %s\n' "$(hostname)" "$2" "$boot" >"$dir/$1/rank0/owner"
  head -c 8192 /dev/urandom >"$dir/$1/rank0/optimizer.swp"
}
plant dead-job $dead
plant live-job $live
mkdir -p "$dir/not-ours/data"

grep -q "usage: zero clean-swap PATH \[--force\]" <<<"$("$zero" clean-swap --help)"
grep -q "clean-swap" <<<"$("$zero" --help)"
if "$zero" clean-swap 2>/dev/null; then echo "FAIL: no PATH accepted"; exit 1; fi
out=$("$zero" clean-swap "$dir")
echo "$out"
grep -q "^removed $dir/dead-job$" <<<"$out"
grep -q "^kept    $dir/live-job: rank0 in use by pid $live" <<<"$out"
grep -q "^kept    $dir/not-ours: not a swap job directory" <<<"$out"
[ ! -e "$dir/dead-job" ] && [ -e "$dir/live-job/rank0/owner" ] && [ -e "$dir/not-ours/data" ]
out=$("$zero" clean-swap "$dir" --force)
grep -q "^removed $dir/live-job$" <<<"$out"
[ -e "$dir/not-ours/data" ]
echo "clean_swap_cli: OK"
