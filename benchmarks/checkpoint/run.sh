#!/usr/bin/env bash
# Checkpoint save/load throughput (bin/checkpoint_bench under bin/zerorun) at stages 3 and 1 on 2
# and 4 local ranks, each against the raw write/read limit of the same directory, as one table.
# Environment: BUILD_DIR (build-bench), DIR (the directory to test; default build-bench/ckpt-bench),
# RANKS ("2 4"), STAGES ("3 1"), PARAMS (90000000), REPEATS (5 timed runs of each phase; the
# table shows the medians), PORT (29970), EXTRA (more checkpoint_bench args: --profile, --verify).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build-bench}
DIR=${DIR:-$BUILD_DIR/ckpt-bench}
RANKS=${RANKS:-"2 4"}
STAGES=${STAGES:-"3 1"}
PARAMS=${PARAMS:-90000000}
REPEATS=${REPEATS:-5}
PORT=${PORT:-29970}
EXTRA=${EXTRA:-}
zerorun="$BUILD_DIR/bin/zerorun"
bench="$BUILD_DIR/bin/checkpoint_bench"
for f in "$zerorun" "$bench"; do
  [ -x "$f" ] || { echo "run.sh: $f not built (ninja -C $BUILD_DIR zerorun checkpoint_bench)" >&2; exit 2; }
done
mkdir -p "$DIR"
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT

echo "Checkpoint save/load on $DIR: $(df -h --output=source,fstype,size "$DIR" | tail -1 | tr -s ' '), $(nproc) cores."
rows=()
notes=()
for ranks in $RANKS; do
  for stage in $STAGES; do
    log="$log_dir/r${ranks}_s$stage.log"
    # shellcheck disable=SC2086
    "$zerorun" --nproc_per_node "$ranks" --master_port "$PORT" --no_local_rank "$bench" \
      --dir "$DIR" --params "$PARAMS" --stage "$stage" --repeats "$REPEATS" $EXTRA >"$log" 2>&1 || {
      echo "run.sh: stage $stage on $ranks ranks failed; log:" >&2; tail -20 "$log" >&2; exit 1; }
    PORT=$((PORT + 1))
    sed -i 's/^\[rank [0-9]*\] //' "$log"  # zerorun prefixes each line with its rank
    rows+=("$(grep -E '^\| [0-9]' "$log" | head -1)")
    notes+=("ranks $ranks, stage $stage: $(grep -h 'checkpoint_bench: \(checkpoint [0-9]\|page cache\|every run\|peak RSS\)' "$log" |
      sed 's/^checkpoint_bench: //' | paste -sd '\t' - | sed 's/\t/; /g')")
    # --profile: its block runs from "profile:" to the first "checkpoint_bench:" line.
    awk '/^profile:/ { p = 1 } /^checkpoint_bench:/ { p = 0 } p' "$log"
  done
done
echo
echo "| ranks | stage | save s | save GB/s | raw write GB/s | save/raw | load s | load GB/s | raw read GB/s | load/raw |"
echo "|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
printf -- '- %s\n' "${notes[@]}"
