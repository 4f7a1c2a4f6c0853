#!/usr/bin/env bash
# with_temp_dir.sh COMMAND...: runs COMMAND with ZERO_TEST_CKPT_DIR (checkpoints) and
# ZERO_TEST_SWAP_DIR (an nvme_path) set to one fresh temporary directory, removed afterwards.
set -euo pipefail
dir=$(mktemp -d "${TMPDIR:-/tmp}/zero_ckpt.XXXXXX")
trap 'rm -rf "$dir"' EXIT
ZERO_TEST_CKPT_DIR=$dir ZERO_TEST_SWAP_DIR=$dir "$@"
