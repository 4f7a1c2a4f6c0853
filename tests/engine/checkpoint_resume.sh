#!/usr/bin/env bash
# checkpoint_resume.sh ZERORUN WORKER WORLD PORT: job 1 trains and saves every case, job 2 (new
# processes) trains straight and from the loaded checkpoints and compares them bitwise.
set -euo pipefail
zerorun=$1 worker=$2 world=$3 port=$4
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_ckpt_resume.XXXXXX")
trap 'rm -rf "$dir"' EXIT
export ZERO_TEST_CKPT_DIR=$dir OMP_NUM_THREADS=1
"$zerorun" --nproc_per_node "$world" --master_port "$port" --no_local_rank "$worker" --suite save
"$zerorun" --nproc_per_node "$world" --master_port "$port" --no_local_rank "$worker" --suite resume
