#!/usr/bin/env bash
# Configures and builds the project into build/ (Ninja, Release by default, ccache when present).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja "$@" >/dev/null
fi
cmake --build "$BUILD_DIR" -j"$(nproc)"
