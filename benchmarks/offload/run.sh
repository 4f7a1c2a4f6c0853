#!/usr/bin/env bash
# The table of benchmarks/offload/README.md: bin/aio_bench (AioEngine against fio) over a few aio
# settings. Environment: BUILD_DIR (build), DIR (the directory to test; default
# $BUILD_DIR/aio-bench), SIZE (MiB per file, 1024), REPEATS (3; the table shows medians).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
DIR=${DIR:-$BUILD_DIR/aio-bench}
SIZE=${SIZE:-1024}
REPEATS=${REPEATS:-3}
bench="$BUILD_DIR/bin/aio_bench"
[ -x "$bench" ] || { echo "run.sh: $bench not built (ninja -C $BUILD_DIR aio_bench)" >&2; exit 2; }
mkdir -p "$DIR"
echo "aio_bench on $DIR: $(findmnt -n -o SOURCE,FSTYPE,OPTIONS -T "$DIR"), $(nproc) cores, $(uname -r)"
header=--header
while read -r args; do
  # shellcheck disable=SC2086
  "$bench" --dir "$DIR" --size "$SIZE" --repeats "$REPEATS" $header $args
  header=
done <<'CASES'
--block_size 1M --queue_depth 8
--block_size 1M --queue_depth 32
--block_size 128K --queue_depth 32
--block_size 4M --queue_depth 8
--block_size 1M --queue_depth 8 --intra_op_parallelism 2
--block_size 1M --queue_depth 8 --single_submit
--block_size 1M --queue_depth 8 --no_overlap_events
CASES
