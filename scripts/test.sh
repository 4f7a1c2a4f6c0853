#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test with ctest.
# GPU tests report as skipped on machines without a device; in a build without a CUDA toolkit the
# CUDA-only ones are not built at all (scripts/setup.sh installs none; a CUDA machine has it).
# Output ends with ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd "${BUILD_DIR:-build}"
exec ctest --output-on-failure -j"$(nproc)" "$@"
