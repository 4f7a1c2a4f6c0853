#!/usr/bin/env bash
# load_state_dict.sh ZERORUN WORKER ZERO PORT: the fine-tune path end to end. A 2-rank job trains
# the example GPT wrapped in zero::Sharded(zero::Checkpointed(..)) at stage 3 and saves a
# checkpoint; `zero checkpoint export` writes it in both formats; Python's torch.load of the
# torch-format file shows exactly the names of the GPT built without wrappers; a second 2-rank
# job loads both files with zero::load_state_dict and gets bitwise the trained model's logits.
set -euo pipefail
zerorun=$1 worker=$2 zero=$3 port=$4
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_load_state_dict.XXXXXX")
trap 'rm -rf "$dir"' EXIT
export ZERO_TEST_CKPT_DIR=$dir
"$zerorun" --nproc_per_node 2 --master_port "$port" --no_local_rank "$worker" --suite export
"$zero" checkpoint export "$dir/ck" "$dir/model.pt" --format torch
"$zero" checkpoint export "$dir/ck" "$dir/model.safetensors"
/usr/bin/python3 - "$dir/model.pt" "$dir/names.txt" <<'PY'
import sys
import torch
state = torch.load(sys.argv[1])
names = open(sys.argv[2]).read().split()
if sorted(state) != sorted(names):
    print("FAIL: torch.load keys", sorted(state), "!= the unwrapped GPT's", sorted(names))
    sys.exit(1)
print(f"torch.load: {len(state)} tensors, exactly the unwrapped GPT's names")
PY
"$zerorun" --nproc_per_node 2 --master_port $((port + 1)) --no_local_rank "$worker" --suite reload
