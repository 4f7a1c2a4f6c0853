#!/usr/bin/env bash
# swap_mounts.sh TEST: runs offload_swap_mounts_test with three small mounts it needs: a full
# 1 MiB tmpfs (ENOSPC), a read-only tmpfs and a ramfs (no O_DIRECT). Skipped (77) where they
# cannot be mounted (not root, or a container that forbids it).
set -euo pipefail
test_bin=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_offload_mounts.XXXXXX")
mkdir "$dir/full" "$dir/ro" "$dir/ramfs"
cleanup() {
  for m in full ro ramfs; do umount "$dir/$m" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
if ! mount -t tmpfs -o size=1m,mode=0700 tmpfs "$dir/full" 2>/dev/null; then
  echo "SKIP: cannot mount a small tmpfs here (needs root)"
  exit 77
fi
mount -t tmpfs -o size=1m,mode=0700 tmpfs "$dir/ro"
mount -o remount,ro "$dir/ro"
mount -t ramfs -o mode=0700 ramfs "$dir/ramfs"
ZERO_TEST_FULL_DIR=$dir/full ZERO_TEST_RO_DIR=$dir/ro ZERO_TEST_RAMFS_DIR=$dir/ramfs "$test_bin"
