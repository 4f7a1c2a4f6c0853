#!/usr/bin/env bash
# engine_events.sh ZERORUN MONITOR_WORKER PROTO_PY_DIR PORT: monitor_worker on 2 ranks, then
# check_worker_run.py holds its csv_monitor/tensorboard files to the events it expected.
set -euo pipefail
zerorun=$1; worker=$2; proto=$3; port=$4
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zero_monitor_events.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$zerorun" --nproc_per_node 2 --master_port "$port" --no_local_rank "$worker" "$tmp"
/usr/bin/python3 "$here/check_worker_run.py" "$proto" "$tmp"
