#!/usr/bin/env bash
# with_small_tmpfs.sh SIZE COMMAND...: runs COMMAND with ZERO_TEST_CKPT_DIR and ZERO_TEST_SWAP_DIR
# set to a fresh tmpfs of SIZE (e.g. 2m, 16k), unmounted and removed afterwards. Exits 77 (skipped) where a tmpfs cannot be mounted (not
# root, or a container that forbids it).
set -euo pipefail
size=$1
shift
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_small_tmpfs.XXXXXX")
if ! mount -t tmpfs -o size="$size" tmpfs "$dir" 2>/dev/null; then
  rmdir "$dir"
  echo "SKIP: cannot mount a small tmpfs here (needs root)"
  exit 77
fi
trap 'umount "$dir"; rmdir "$dir"' EXIT
ZERO_TEST_CKPT_DIR=$dir ZERO_TEST_SWAP_DIR=$dir OMP_NUM_THREADS=1 "$@"
