#!/usr/bin/env bash
# Builds the ds_config fuzz target with clang's libFuzzer + ASan + UBSan straight from config/
# sources (no CMake) and fuzzes for SECONDS (default 60). New inputs go to tests/fuzz/corpus-work.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-60}
out=${FUZZ_BUILD_DIR:-$root/build-fuzz}
work=$root/tests/fuzz/corpus-work
mkdir -p "$out" "$work"
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" "$root"/config/*.cpp "$root/tests/fuzz/config_fuzz.cpp" -o "$out/config_fuzz"
cd "$out"
exec ./config_fuzz -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
  -dict="$root/tests/fuzz/config.dict" "$work" "$root/tests/fuzz/corpus"
