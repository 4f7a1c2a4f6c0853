#!/usr/bin/env bash
# checkpoint_node_local.sh WORKER PORT: 4 ranks as 2 simulated nodes of 2 (RANK, LOCAL_RANK,
# LOCAL_WORLD_SIZE as a launcher sets them); each node's ranks run in their own mount namespace
# where the checkpoint path is that node's own directory, so nothing is shared between nodes.
# Skipped (77) where mount namespaces are not allowed.
set -euo pipefail
worker=$1 port=$2
base=$(mktemp -d "${TMPDIR:-/tmp}/zero_ckpt_nodes.XXXXXX")
trap 'rm -rf "$base"' EXIT
mkdir -p "$base/node0" "$base/node1" "$base/ckpt"
if ! unshare -m sh -c "mount --bind '$base/node0' '$base/ckpt'" 2>/dev/null; then
  echo "SKIP: mount namespaces (unshare -m, mount --bind) are not available here"
  exit 77
fi
pids=()
for r in 0 1 2 3; do
  node=$((r / 2))
  RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$port ZERO_TEST_CKPT_DIR=$base/ckpt OMP_NUM_THREADS=1 \
    unshare -m sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh \
    "$base/node$node" "$base/ckpt" "$worker" --suite node_local &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
ls "$base/node0"/*/ "$base/node1"/*/
exit $rc
