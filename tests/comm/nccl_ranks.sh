#!/usr/bin/env bash
# nccl_ranks.sh ZERORUN WORKER PORT: nccl_ranks on every visible GPU (at most 4), one rank each;
# skipped (77) with fewer than two GPUs.
set -euo pipefail
zerorun=$1 worker=$2 port=$3
gpus=$("$worker" --devices)
if [ "$gpus" -lt 2 ]; then
  echo "skipped: NCCL across ranks needs two GPUs; this machine shows $gpus"
  exit 77
fi
"$zerorun" --nproc_per_node "$((gpus < 4 ? gpus : 4))" --master_port "$port" --no_local_rank "$worker"
