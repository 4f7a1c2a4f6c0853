#!/usr/bin/env bash
# checkpoint_disk_full.sh ZERORUN WORKER PORT: a save into a full 2 MiB tmpfs fails cleanly and
# the previous checkpoint still loads (checkpoint_worker --suite disk_full). Skipped (77) where
# a tmpfs cannot be mounted (not root, or in a container that forbids it).
set -euo pipefail
zerorun=$1 worker=$2 port=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_ckpt_full.XXXXXX")
if ! mount -t tmpfs -o size=2m tmpfs "$dir" 2>/dev/null; then
  rmdir "$dir"
  echo "SKIP: cannot mount a small tmpfs here (needs root)"
  exit 77
fi
trap 'umount "$dir"; rmdir "$dir"' EXIT
ZERO_TEST_CKPT_DIR=$dir OMP_NUM_THREADS=1 "$zerorun" --nproc_per_node 2 --master_port "$port" \
  --no_local_rank "$worker" --suite disk_full
