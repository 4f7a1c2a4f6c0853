#!/usr/bin/env bash
# The outside reader: Debian's /usr/bin/python3 with its own torch loads what `zero checkpoint
# export` wrote (torch.load for --format torch, a from-the-spec reader for safetensors, sharded
# or not) and compares it with the engine's parameters: bit-identical in fp32, and equal to the
# bf16 rounding for bf16 exports and for a bf16 run. Exits 77 (skipped) without python3-torch.
# usage: python_reader_test.sh ZERO ZERORUN CHECKPOINT_MAKER PORT READ_EXPORT_PY  (PORT, PORT+1)
set -u
zero=$1 zerorun=$2 maker=$3 port=$4 reader=$5
python=/usr/bin/python3
if ! "$python" -c "import torch" >/dev/null 2>&1; then
  echo "SKIP: $python cannot import torch (Debian: apt-get install python3-torch)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# make_checkpoint NAME WORLD STAGE PRECISION PORT
make_checkpoint() {
  "$zerorun" --nproc_per_node "$2" --master_port "$5" --no_local_rank "$maker" make \
    --dir "$dir/$1" --stage "$3" --precision "$4" --steps 3 --ref "$dir/$1.ref.safetensors" \
    >"$dir/$1.log" 2>&1 || { cat "$dir/$1.log"; echo "FAIL: checkpoint_maker $1"; exit 1; }
}
export_to() {  # export_to NAME OUT [ARGS...]
  local name=$1 out=$2
  shift 2
  "$zero" checkpoint export "$dir/$name" "$out" "$@" >/dev/null || fail "export $name $out $*"
}

make_checkpoint s3 2 3 fp32 "$port"
export_to s3 "$dir/s3_out/model.safetensors"
export_to s3 "$dir/s3_out/model.pt" --format torch
export_to s3 "$dir/s3_out/bf16/model.safetensors" --dtype bf16
export_to s3 "$dir/s3_out/bf16/model.pt" --dtype bf16 --format torch
export_to s3 "$dir/s3_out/sharded/model.safetensors" --max-shard-size 10KB
"$python" "$reader" "$dir/s3.ref.safetensors" \
  "$dir/s3_out/model.safetensors:fp32:exact" "$dir/s3_out/model.pt:fp32:exact" \
  "$dir/s3_out/bf16/model.safetensors:bf16" "$dir/s3_out/bf16/model.pt:bf16" \
  "$dir/s3_out/sharded/model.safetensors.index.json:fp32:exact" || fail "stage 3 fp32 exports"

make_checkpoint b1 1 1 bf16 $((port + 1))
export_to b1 "$dir/b1_out/model.safetensors"
export_to b1 "$dir/b1_out/model.pt" --dtype bf16 --format torch
"$python" "$reader" "$dir/b1.ref.safetensors" \
  "$dir/b1_out/model.safetensors:fp32" "$dir/b1_out/model.pt:bf16:exact" || fail "bf16 run exports"

[ "$failures" -eq 0 ] || { echo "python_reader_test: $failures failure(s)"; exit 1; }
echo "python_reader_test: ok"
