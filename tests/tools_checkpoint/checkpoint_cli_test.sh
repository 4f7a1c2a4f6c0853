#!/usr/bin/env bash
# `zero checkpoint inspect|export` end to end on real checkpoints (stage 3 fp32 and stage 2 bf16,
# two ranks each): the listing, --verify, every export format checked by `checkpoint_maker
# compare` against the engine's own parameters, sharding, the progress bar on a terminal, and
# exit 1 with one line naming the culprit for a corrupt or missing file and an unknown tag.
# usage: checkpoint_cli_test.sh ZERO ZERORUN CHECKPOINT_MAKER PORT  (uses PORT and PORT+1)
set -u
zero=$1 zerorun=$2 maker=$3 port=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run NAME EXPECTED_EXIT CMD...: runs CMD, keeps stdout/stderr in $dir/NAME.{out,err}
run() {
  local name=$1 expected=$2
  shift 2
  "$@" >"$dir/$name.out" 2>"$dir/$name.err"
  local rc=$?
  [ "$rc" -eq "$expected" ] || fail "$name: exit $rc, expected $expected; stderr: $(head -c 800 "$dir/$name.err")"
}
expect_out() { grep -qF -- "$2" "$dir/$1.out" || fail "$1: stdout lacks '$2': $(head -c 1500 "$dir/$1.out")"; }
expect_err() { grep -qF -- "$2" "$dir/$1.err" || fail "$1: stderr lacks '$2': $(head -c 800 "$dir/$1.err")"; }
one_line_err() { [ "$(wc -l <"$dir/$1.err")" -eq 1 ] || fail "$1: stderr is not one line: $(cat "$dir/$1.err")"; }

# make_checkpoint NAME STAGE PRECISION PORT: a 2-rank run saves $dir/NAME/global_step3
make_checkpoint() {
  "$zerorun" --nproc_per_node 2 --master_port "$4" --no_local_rank "$maker" make --dir "$dir/$1" \
    --stage "$2" --precision "$3" --steps 3 --ref "$dir/$1.ref.safetensors" >"$dir/$1.log" 2>&1 ||
    { cat "$dir/$1.log"; echo "FAIL: checkpoint_maker $1"; exit 1; }
}
compare() { run "compare_$1" 0 "$maker" compare "$2" "$3" "$4" ${5:+"$5"}; }

make_checkpoint s3 3 fp32 "$port"
ck=$dir/s3
ref=$dir/s3.ref.safetensors

# --- inspect ------------------------------------------------------------------------------------
run inspect 0 "$zero" checkpoint inspect "$ck"
for want in "checkpoint:    $ck/global_step3" "tag:           global_step3" "world size:    2" \
            "stage:         3" "precision:     fp32" "optimizer:     AdamW" \
            "state kinds:   master, exp_avg, exp_avg_sq" \
            "counters:      global_steps 3, micro_steps 3, skipped_steps 0" \
            "loss scaler:   none" 'client_state:  {"epoch":1,"note":"checkpoint_maker"}' \
            "files:         2, " "rank00000.safetensors" "rank00001.safetensors" \
            "parameters:    12, " "[24, 127]" "buffers:       2, 8 elements" "running_mean" "I64"; do
  expect_out inspect "$want"
done
[ -s "$dir/inspect.err" ] && fail "inspect: wrote to stderr: $(cat "$dir/inspect.err")"
run inspect_tag 0 "$zero" checkpoint inspect "$ck" --tag global_step3
run inspect_tagdir 0 "$zero" checkpoint inspect "$ck/global_step3"
expect_out inspect_tagdir "tag:           global_step3"
run verify 0 "$zero" checkpoint inspect "$ck" --verify
expect_out verify "checksums ok (2 files, "

# --- export -------------------------------------------------------------------------------------
out=$dir/out
run export 0 "$zero" checkpoint export "$ck" "$out/model.safetensors"
expect_out export "exported 14 tensors, "
expect_out export "to $out/model.safetensors in "
[ -s "$dir/export.err" ] && fail "export: no terminal, yet stderr has: $(cat "$dir/export.err")"
compare fp32 "$ref" "$out/model.safetensors" fp32 exact
# Keys are the model's own names (the reference's); --keep-wrapper-names keeps zero::Sharded's
# `inner.` segments, as the manifest registered them.
grep -aq '"blocks\.0\.inner\.' "$out/model.safetensors" && fail "export: a wrapper's segment in the keys"
run export_keep 0 "$zero" checkpoint export "$ck" "$out/keep/model.safetensors" --keep-wrapper-names
grep -aq '"blocks\.0\.inner\.fc1\.weight"' "$out/keep/model.safetensors" ||
  fail "export --keep-wrapper-names: no blocks.0.inner.fc1.weight key"
run export_torch 0 "$zero" checkpoint export "$ck" "$out/model.pt" --format torch
compare torch "$ref" "$out/model.pt" fp32 exact
run export_bf16 0 "$zero" checkpoint export "$ck" "$out/bf16/model.safetensors" --dtype=bf16 --tag global_step3
compare bf16 "$ref" "$out/bf16/model.safetensors" bf16
run export_fp16_torch 0 "$zero" checkpoint export "$ck" "$out/model_fp16.pt" --format torch --dtype fp16
[ "$(find "$out" -name '*.tmp-*' | wc -l)" -eq 0 ] || fail "temporary files left: $(find "$out" -name '*.tmp-*')"

# Sharded: input.weight (12192 bytes) alone is over 10KB, so it gets a shard of its own; the
# unsharded file of an earlier export goes (loaders would prefer it to the index).
run export_unsharded 0 "$zero" checkpoint export "$ck" "$out/sharded/model.safetensors"
run export_sharded 0 "$zero" checkpoint export "$ck" "$out/sharded/model.safetensors" --max-shard-size 10KB
expect_out export_sharded "shards and $out/sharded/model.safetensors.index.json"
[ -e "$out/sharded/model.safetensors" ] && fail "sharded export also wrote model.safetensors"
shards=$(cd "$out/sharded" && ls model-*-of-*.safetensors 2>/dev/null)
n=$(echo "$shards" | grep -c .)
[ "$n" -ge 3 ] || fail "expected at least 3 shards, got: $shards"
[ "$(echo "$shards" | head -1)" = "model-00001-of-$(printf %05d "$n").safetensors" ] || fail "shard names: $shards"
python3 - "$out/sharded" "$n" <<'PY' || fail "sharded index"
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
files = sorted(set(index["weight_map"].values()))
assert files == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)], files
assert len(index["weight_map"]) == 14, index["weight_map"]
data = 0
for f in files:
    raw = open(os.path.join(d, f), "rb").read()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    header.pop("__metadata__")
    data += sum(v["data_offsets"][1] - v["data_offsets"][0] for v in header.values())
assert index["metadata"]["total_size"] == data, (index["metadata"], data)
PY
compare sharded "$ref" "$out/sharded/model.safetensors.index.json" fp32 exact
run export_torch_sharded 1 "$zero" checkpoint export "$ck" "$out/big.pt" --format torch --max-shard-size 10KB
expect_err export_torch_sharded "--format torch writes one file"
one_line_err export_torch_sharded
[ -e "$out/big.pt" ] && fail "a refused torch export wrote $out/big.pt"

# On a terminal: a progress bar redrawn in place on stderr, then the summary.
if command -v script >/dev/null; then
  script -qec "'$zero' checkpoint inspect '$ck' --verify" /dev/null >"$dir/tty_verify.out" 2>&1 ||
    fail "verify on a terminal failed"
  grep -q $'\r''verify \[' "$dir/tty_verify.out" || fail "verify on a terminal: no progress bar: $(cat -v "$dir/tty_verify.out" | tail -3)"
  script -qec "'$zero' checkpoint export '$ck' '$out/tty/model.safetensors'" /dev/null >"$dir/tty_export.out" 2>&1 ||
    fail "export on a terminal failed"
  if ! grep -q $'\r''export \[.*MiB/s' "$dir/tty_export.out"; then
    fail "export on a terminal: no progress bar: $(cat -v "$dir/tty_export.out")"
  fi
fi

# --- a bf16 run at stage 2: the fp32 export is the masters, which round to the bf16 parameters ---
make_checkpoint s2 2 bf16 $((port + 1))
run inspect_bf16 0 "$zero" checkpoint inspect "$dir/s2" --verify
expect_out inspect_bf16 "precision:     bf16"
expect_out inspect_bf16 "stage:         2"
expect_out inspect_bf16 "BF16"
run export_s2 0 "$zero" checkpoint export "$dir/s2" "$dir/out_s2/model.safetensors"
compare s2_fp32 "$dir/s2.ref.safetensors" "$dir/out_s2/model.safetensors" fp32
run export_s2_bf16 0 "$zero" checkpoint export "$dir/s2" "$dir/out_s2/model_bf16.pt" --dtype bf16 --format torch
compare s2_bf16 "$dir/s2.ref.safetensors" "$dir/out_s2/model_bf16.pt" bf16 exact

# --- broken checkpoints and bad use: exit 1, one line on stderr naming the problem --------------
run no_tag 1 "$zero" checkpoint inspect "$ck" --tag global_step99
expect_err no_tag "global_step99"
expect_err no_tag "tags there: global_step3"
one_line_err no_tag
run no_tag_export 1 "$zero" checkpoint export "$ck" "$dir/none/model.safetensors" --tag nope
expect_err no_tag_export "no such checkpoint directory"
[ -e "$dir/none" ] && fail "a failed export created $dir/none"

cp -r "$ck" "$dir/nolatest" && rm "$dir/nolatest/latest"
run no_latest 1 "$zero" checkpoint inspect "$dir/nolatest"
expect_err no_latest "no 'latest' file, so pass --tag (tags there: global_step3)"
one_line_err no_latest
run no_dir 1 "$zero" checkpoint inspect "$dir/does_not_exist"
expect_err no_dir "does_not_exist: no such directory"

cp -r "$ck" "$dir/corrupt"
victim=$dir/corrupt/global_step3/rank00001.safetensors
offset=$(($(stat -c %s "$victim") / 2))
byte=$(od -An -tu1 -j "$offset" -N1 "$victim" | tr -d ' ')
printf '%b' "\\0$(printf %03o $((byte ^ 0x5a)))" | dd of="$victim" bs=1 seek="$offset" conv=notrunc status=none
run corrupt_plain 0 "$zero" checkpoint inspect "$dir/corrupt"
run corrupt_verify 1 "$zero" checkpoint inspect "$dir/corrupt" --verify
expect_err corrupt_verify "$victim: checksum mismatch"
one_line_err corrupt_verify
expect_out corrupt_verify "rank00001.safetensors"

cp -r "$ck" "$dir/missing" && rm "$dir/missing/global_step3/rank00001.safetensors"
run missing_inspect 1 "$zero" checkpoint inspect "$dir/missing"
expect_err missing_inspect "rank00001.safetensors: missing (the manifest lists it)"
expect_out missing_inspect "MISSING"
one_line_err missing_inspect
run missing_export 1 "$zero" checkpoint export "$dir/missing" "$dir/out_missing/model.safetensors"
expect_err missing_export "rank00001.safetensors"
one_line_err missing_export
[ -n "$(ls -A "$dir/out_missing" 2>/dev/null)" ] && fail "a failed export left: $(ls -A "$dir/out_missing")"

for bad in "inspect" "inspect $ck extra" "inspect $ck --bogus" "export $ck" \
           "export $ck $dir/x.safetensors --dtype fp8" "export $ck $dir/x.safetensors --format onnx" \
           "export $ck $dir/x.safetensors --max-shard-size 12QB" "export $ck $dir/x.safetensors --max-shard-size 0" \
           "export $ck $dir/x.safetensors --tag"; do
  # shellcheck disable=SC2086
  run usage 1 "$zero" checkpoint $bad
  one_line_err usage
done
run help 0 "$zero" checkpoint export --help
expect_out help "usage: zero checkpoint export DIR OUT"
run help_group 0 "$zero" checkpoint --help
expect_out help_group "zero checkpoint inspect DIR"
run help_all 0 "$zero" --help
expect_out help_all "checkpoint export"

[ "$failures" -eq 0 ] || { echo "checkpoint_cli_test: $failures failure(s)"; exit 1; }
echo "checkpoint_cli_test: ok"
