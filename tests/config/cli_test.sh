#!/usr/bin/env bash
# `zero config` end to end: exit 0 with the resolved JSON on stdout, exit 2 with one
# "FILE:LINE: dotted.path: message" line per problem on stderr; --world-size, --set, --strict.
set -u
zero=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run NAME EXPECTED_EXIT ARGS...: runs `zero config ARGS`, keeps stdout/stderr in $dir/NAME.{out,err}
run() {
  local name=$1 expected=$2
  shift 2
  "$zero" config "$@" >"$dir/$name.out" 2>"$dir/$name.err"
  local rc=$?
  [ "$rc" -eq "$expected" ] || fail "$name: exit $rc, expected $expected; stderr: $(head -c 600 "$dir/$name.err")"
}
expect_out() { grep -q -- "$2" "$dir/$1.out" || fail "$1: stdout lacks '$2'"; }
expect_err() { grep -q -- "$2" "$dir/$1.err" || fail "$1: stderr lacks '$2': $(head -c 600 "$dir/$1.err")"; }
# every stderr line of a failed run has the FILE:LINE: dotted.path: message shape
expect_shape() {
  [ -s "$dir/$1.err" ] || fail "$1: empty stderr"
  if grep -v -E '^[^:]+:[0-9]+: [][A-Za-z0-9_.()-]+: .+' "$dir/$1.err"; then fail "$1: badly shaped stderr line"; fi
}

cat >"$dir/ok.json" <<'JSON'
{
  // HF-style config with "auto" batch sizes
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": 2,
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},},
  "bf16": {"enabled": true},
  "steps_per_prnt": 5
}
JSON
run ok 0 "$dir/ok.json" --world-size 4 --set train_micro_batch_size_per_gpu=3
expect_out ok '"train_batch_size": 24'
expect_out ok '"stage": 2'
expect_out ok '"stage3_prefetch_bucket_size": 50000000'
expect_err ok "^$dir/ok.json:8: steps_per_prnt: warning: unknown key"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$dir/ok.out" || fail "ok: stdout is not JSON"

run world 0 "$dir/ok.json" --world-size=2 --set=train_micro_batch_size_per_gpu=5
expect_out world '"train_batch_size": 20'

run strict 2 "$dir/ok.json" --strict --set train_micro_batch_size_per_gpu=3
expect_err strict "^$dir/ok.json:8: steps_per_prnt: (--strict) unknown key 'steps_per_prnt'"
expect_shape strict
[ -s "$dir/strict.out" ] && fail "strict: printed a config although it failed"

run auto 2 "$dir/ok.json"
expect_err auto "^$dir/ok.json:4: train_micro_batch_size_per_gpu: \"auto\" cannot be determined"
expect_shape auto

cat >"$dir/bad.json" <<'JSON'
{
  "train_batch_size": 48,
  "train_micro_batch_size_per_gpu": 4,
  "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_sise": 10},
  "communication_data_type": "bfp16",
  "fp16": {"enabled": true}, "bf16": {"enabled": true}
}
JSON
run bad 2 "$dir/bad.json" --world-size 8
expect_shape bad
expect_err bad "^$dir/bad.json:2: train_batch_size: batch sizes do not fit"
expect_err bad "^$dir/bad.json:4: zero_optimization.stage3_prefetch_bucket_sise: unknown key .*did you mean 'stage3_prefetch_bucket_size'"
expect_err bad "^$dir/bad.json:5: communication_data_type: unknown value \"bfp16\""
expect_err bad "^$dir/bad.json:6: bf16.enabled: fp16 and bf16 are both enabled"
[ "$(wc -l <"$dir/bad.err")" -eq 4 ] || fail "bad: expected 4 problems, got $(cat "$dir/bad.err")"

printf '{\n  "train_batch_size": 8\n  "fp16": {}\n}\n' >"$dir/syntax.json"
run syntax 2 "$dir/syntax.json"
expect_err syntax "^$dir/syntax.json:3: (root): syntax error at column 3"

head -c 3000 /dev/urandom >"$dir/random.bin"
run random 2 "$dir/random.bin"
expect_shape random

run missing 2 "$dir/does_not_exist.json"
expect_shape missing
run dir 2 "$dir"
run noargs 2
run badws 2 "$dir/ok.json" --world-size zero
run badws0 2 "$dir/ok.json" --world-size 0
run badset 2 "$dir/ok.json" --set novalue
run badopt 2 "$dir/ok.json" --frobnicate
run twofiles 2 "$dir/ok.json" "$dir/bad.json"
run help 0 --help

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "zero config: all checks passed"
