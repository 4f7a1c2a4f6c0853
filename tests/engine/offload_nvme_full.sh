#!/usr/bin/env bash
# offload_nvme_full.sh ZERORUN WORKER PORT: NVMe optimizer offload whose nvme_path is a full
# 16 KiB tmpfs fails at initialize naming the swap file, its size and the rank
# (offload_worker --suite nvme_full). Skipped (77) where a tmpfs cannot be mounted (not root).
set -euo pipefail
zerorun=$1 worker=$2 port=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_swap_full.XXXXXX")
if ! mount -t tmpfs -o size=16k tmpfs "$dir" 2>/dev/null; then
  rmdir "$dir"
  echo "SKIP: cannot mount a small tmpfs here (needs root)"
  exit 77
fi
trap 'umount "$dir"; rmdir "$dir"' EXIT
ZERO_TEST_SWAP_DIR=$dir OMP_NUM_THREADS=1 "$zerorun" --nproc_per_node 2 --master_port "$port" \
  --no_local_rank "$worker" --suite nvme_full
# Nothing of the failed job is left behind.
left=$(find "$dir" -mindepth 1 | wc -l)
if [ "$left" -ne 0 ]; then
  echo "FAILED: $left entries left in the nvme_path:"; find "$dir" -mindepth 1
  exit 1
fi
