#!/usr/bin/env bash
# checkpoint_reshard.sh ZERORUN WORKER PORT: checkpoints saved at (world 4, stage 3) load at
# (2, 1), (3, 2) and (1, 0), and those saved there load at (4, 3); each run continues to the end
# and is compared with one plain LibTorch process. Every save and load is its own job.
set -euo pipefail
zerorun=$1 worker=$2 port=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_ckpt_reshard.XXXXXX")
trap 'rm -rf "$dir"' EXIT
export ZERO_TEST_CKPT_DIR=$dir OMP_NUM_THREADS=1
job() {  # job WORLD STAGE SUITE [SOURCES]
  ZERO_TEST_STAGE=$2 ZERO_TEST_SOURCES=${4:-} \
    "$zerorun" --nproc_per_node "$1" --master_port "$port" --no_local_rank "$worker" --suite "$3"
}
for ws in "4 3" "2 1" "3 2" "1 0"; do job $ws reshard_save; done
job 4 3 reshard_load "from_w2s1 from_w3s2 from_w1s0 from_w4s3"
for ws in "2 1" "3 2" "1 0"; do job $ws reshard_load from_w4s3; done
