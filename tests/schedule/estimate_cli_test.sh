#!/usr/bin/env bash
# `zero estimate` end to end: JSON numbers for 1B parameters on 8 devices (hand-computed, see
# memory_estimate_test.cpp), the table, and exit code 2 with a message on bad input.
set -u
zero="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }

json=$("$zero" estimate --params 1B --largest-layer-params=100M --gpus-per-node 8 --json) || fail "exit $?"
compact=$(echo "$json" | tr -d ' \n')
for want in '"params":1000000000' '"device_bytes":16000000000' '"device_bytes":5500000000' \
            '"device_bytes":3750000000' '"deepspeed_device_bytes":4250000000' '"device_bytes":2400000000' \
            '"deepspeed_device_bytes":2650000000' '"host_bytes":48000000000'; do
  [[ "$compact" == *"$want"* ]] || fail "missing $want in: $json"
done
rows=$(echo "$compact" | grep -o '"stage":' | wc -l)
[ "$rows" -eq 8 ] || fail "expected 8 rows, got $rows"

table=$("$zero" estimate --params 7e9 --nodes 2 --gpus-per-node 4 --precision bf16) || fail "table exit $?"
[[ "$table" == *"7.00B parameters"* && "$table" == *"2 node(s) x 4 device(s), bf16"* ]] || fail "table header: $table"
[ "$(echo "$table" | grep -cE '^ +[0-3]  ')" -eq 8 ] || fail "table rows: $table"

for bad in "--params" "--params 12Q" "--nodes 2" "--params 10 --precision fp8" "--params 10 --bogus 1" \
           "--params 10 --largest-layer-params 11"; do
  # shellcheck disable=SC2086
  err=$("$zero" estimate $bad 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq 2 ] || fail "'estimate $bad' exited $rc, expected 2"
  [ -n "$err" ] || fail "'estimate $bad' printed no error"
done
echo "estimate_cli_test: ok"
