#!/usr/bin/env bash
# The GPU machine's build, rehearsed here: scripts/gpu_deps.sh writes a fresh bundle, then
# scripts/gpu_check.sh configures against it with Debian's LibTorch standing in for pip's and
# stops after the configure (its nvcc-only kernel phase runs too). A second run, stopped by
# `timeout`'s SIGTERM to its whole process group (as a device call's limit would), must still
# leave its summary and no process behind.
# Usage: gpu_check_dry_run.sh SOURCE_DIR. Exit 77 (skipped) only when a tool it needs is absent.
set -uo pipefail
src=$1
for tool in cmake ninja python3 dpkg-query timeout pgrep; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not found" >&2; exit 77; }
done
[ -f /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake ] ||
  { echo "SKIP: no Debian LibTorch to stand in for pip's" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

bash "$src/scripts/gpu_deps.sh" "$tmp/deps" >"$tmp/deps.log" 2>&1 || { cat "$tmp/deps.log" >&2; fail "gpu_deps.sh"; }
[ -f "$tmp/deps/uring/lib/liburing.a" ] && [ -f "$tmp/deps/uring/include/liburing.h" ] ||
  fail "the bundle has no liburing"

check() {  # NAME EXTRA_ENV...: one run of gpu_check.sh into $tmp/NAME
  env TORCH_CMAKE_PREFIX=/usr GPU_DEPS="$tmp/deps" BUILD_DIR="$tmp/$1/build" GPU_CHECK_OUT="$tmp/$1/out" \
    STOP_AFTER_CONFIGURE=1 JOBS=2 "${@:2}" timeout 170 bash "$src/scripts/gpu_check.sh" >"$tmp/$1.log" 2>&1
}

# Killed while the configure runs (beside the kernel phase where nvcc is present): the summary is
# still written. Killed as soon as CMake started: without nvcc the whole dry run takes seconds.
check killed &
pid=$!
for _ in $(seq 1 3000); do
  [ -d "$tmp/killed/build/CMakeFiles" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.02
done
relay=$(pgrep -P "$pid" -x timeout | head -1)  # the `timeout 170` of check()
[ -n "$relay" ] || { cat "$tmp/killed.log" >&2; fail "gpu_check.sh ended before its configure could be interrupted"; }
kill -TERM "$relay"
wait "$pid" && fail "a killed run exited 0"
grep -q 'killed by SIGTERM' "$tmp/killed/out/summary.txt" 2>/dev/null ||
  { cat "$tmp/killed.log" >&2; fail "no summary from the killed run"; }
sleep 2
if pgrep -f "$tmp/killed" >/dev/null; then
  pgrep -af "$tmp/killed" >&2
  fail "processes of the killed run are still running"
fi

check dry
rc=$?
cat "$tmp/dry.log"
[ $rc -eq 0 ] || fail "gpu_check.sh exited $rc"
rows="$tmp/dry/out/results.tsv"
grep -q $'^build\tconfigure\tpassed' "$rows" || fail "no passed configure row"
grep -q $'^build\tbundle\tpassed' "$rows" || fail "a package did not come from the bundle"
cache="$tmp/dry/build/CMakeCache.txt"
for v in nlohmann_json_DIR spdlog_DIR Catch2_DIR Gloo_DIR ZERO_URING_INCLUDE_DIR ZERO_URING_LIBRARY; do
  grep -q "^$v:[A-Z]*=$tmp/deps/" "$cache" || fail "$v is not in the bundle: $(grep "^$v:" "$cache")"
done
# The bundle's Gloo headers are a plain -I, ahead of any -isystem (torch's include/gloo).
grep -q -- "-I$tmp/deps/gloo/include" "$tmp/dry/build/build.ninja" || fail "the bundle's Gloo headers are not a plain -I"
if grep -q 'ZERO_HAS_CUDA=1' "$tmp/dry/build/build.ninja"; then
  grep -q $'^kernels\tnvcc-build\tpassed' "$rows" || fail "the nvcc-only kernel build failed"
fi
[ -f "$tmp/dry/out/summary.json" ] || fail "no summary.json"
echo "gpu_check dry run: configure with the bundle passed; a killed run left its summary"
