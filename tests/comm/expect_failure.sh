#!/usr/bin/env bash
# Runs a command that must fail: checks its exit status is non-zero, that it ended within
# MAX_SECONDS (no hang) and that its output matches every REGEX (grep -E).
# usage: expect_failure.sh MAX_SECONDS REGEX... -- COMMAND...
set -u
max=$1
shift
regexes=()
while (($# > 0)) && [[ $1 != -- ]]; do regexes+=("$1"); shift; done
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
timeout -k 5 "$max" "$@" >"$log" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
cat "$log"
echo "expect_failure: exit status $rc after ${elapsed}s"
fail=0
if ((rc == 0)); then echo "expect_failure: FAIL: the command succeeded"; fail=1; fi
if ((rc == 124 || rc == 137)); then echo "expect_failure: FAIL: still running after ${max}s (hang)"; fail=1; fi
for re in "${regexes[@]}"; do
  if ! grep -Eq -- "$re" "$log"; then echo "expect_failure: FAIL: no output line matches '$re'"; fail=1; fi
done
exit $fail
