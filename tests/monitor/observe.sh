#!/usr/bin/env bash
# observe.sh ZERORUN OBSERVE_WORKER PORT: observe_worker on 2 ranks (it checks the comms logger's
# counts itself), then check_observe.py holds its wall_clock_breakdown lines to their rules.
set -euo pipefail
zerorun=$1; worker=$2; port=$3
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp "${TMPDIR:-/tmp}/zero_observe.XXXXXX")
trap 'rm -f "$out"' EXIT
"$zerorun" --nproc_per_node 2 --master_port "$port" --no_local_rank "$worker" > "$out" 2>&1 || {
  cat "$out"; exit 1; }
cat "$out"
[ "$(grep -c "observe_worker: stage [12] counts OK" "$out")" = 2 ] || { echo "FAIL: counts"; exit 1; }
grep -q "Comm. Op" "$out" || { echo "FAIL: no comms summary"; exit 1; }
/usr/bin/python3 "$here/check_observe.py" "$out" 6 2 2
