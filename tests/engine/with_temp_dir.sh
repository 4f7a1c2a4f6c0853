#!/usr/bin/env bash
# with_temp_dir.sh COMMAND...: runs COMMAND with ZERO_TEST_CKPT_DIR set to a fresh temporary
# directory, removed afterwards.
set -euo pipefail
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_ckpt.XXXXXX")
trap 'rm -rf "$dir"' EXIT
ZERO_TEST_CKPT_DIR=$dir "$@"
