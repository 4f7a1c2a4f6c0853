#!/usr/bin/env bash
# mics_check.sh ZERORUN WORKER PORT: the MiCS suite of zeropp_worker on 4 ranks, each pair of
# ranks claiming a host of its own (CROSS_RANK, the launcher's node index, which host discovery
# reads), with a checkpoint folder removed at the end.
set -euo pipefail
zerorun=$1 worker=$2 port=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_mics.XXXXXX")
trap 'rm -rf "$dir"' EXIT
export ZERO_TEST_CKPT_DIR=$dir OMP_NUM_THREADS=1 ZERO_TEST_WORKER=$worker
"$zerorun" --nproc_per_node 4 --master_port "$port" --no_local_rank \
  bash -c 'CROSS_RANK=$((RANK / 2)) exec "$ZERO_TEST_WORKER" --suite mics'
