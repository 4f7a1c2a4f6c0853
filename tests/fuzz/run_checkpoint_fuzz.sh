#!/usr/bin/env bash
# Builds the safetensors reader's fuzz target with clang's libFuzzer + ASan + UBSan straight from
# checkpoint/ sources (no CMake, no LibTorch) and fuzzes for SECONDS (default 60). New inputs go
# to tests/fuzz/checkpoint-corpus-work; crashes to crash-* files in the build directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-60}
out=${FUZZ_BUILD_DIR:-$root/build-fuzz}
work=$root/tests/fuzz/checkpoint-corpus-work
mkdir -p "$out" "$work"
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" "$root"/checkpoint/*.cpp "$root/tests/fuzz/checkpoint_fuzz.cpp" \
  -o "$out/checkpoint_fuzz"
cd "$out"
exec ./checkpoint_fuzz -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
  -print_final_stats=1 -dict="$root/tests/fuzz/checkpoint.dict" \
  "$work" "$root/tests/fuzz/checkpoint_corpus"
