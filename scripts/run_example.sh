#!/usr/bin/env bash
# The README's main command. Until the training engine lands this builds and runs `zero report`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
exec "${BUILD_DIR:-build}/bin/zero" report
