#!/usr/bin/env bash
# Build-time benchmark (not a test): a cold build of every target from an empty build folder
# with ccache disabled, then incremental rebuilds after touching a few files. Prints the wall
# times, the compiler time summed by top folder (from .ninja_log) and the ten slowest steps.
#
#   benchmarks/build/run.sh [CMAKE_ARGS...]      e.g. -DCMAKE_CXX_COMPILER=g++
#
# BUILD_DIR (default build-bench) is removed first and left behind for inspection.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
BUILD_DIR=${BUILD_DIR:-build-bench}
export CCACHE_DISABLE=1
TOUCH_FILES=(engine/engine.cpp core/flat_stage.cpp tests/engine/engine_worker.cpp)

now() { date +%s.%N; }
rm -rf "$BUILD_DIR"
t0=$(now)
cmake -S . -B "$BUILD_DIR" -G Ninja "$@" >"$BUILD_DIR.configure.log" 2>&1 || {
  cat "$BUILD_DIR.configure.log"; exit 1; }
t1=$(now)
cmake --build "$BUILD_DIR" -j"$(nproc)" >"$BUILD_DIR.build.log" 2>&1 || {
  tail -50 "$BUILD_DIR.build.log"; exit 1; }
t2=$(now)
cp "$BUILD_DIR/.ninja_log" "$BUILD_DIR.cold.ninja_log"

declare -a touch_rows
for f in "${TOUCH_FILES[@]}"; do
  touch "$f"
  a=$(now)
  cmake --build "$BUILD_DIR" -j"$(nproc)" >>"$BUILD_DIR.build.log" 2>&1
  b=$(now)
  touch_rows+=("$(printf '| rebuild after touching `%s` | %.0f s |' "$f" "$(echo "$b - $a" | bc)")")
done

# The configure's summary line names compiler, build type, linker and PCH.
summary=$(grep -m1 -o 'Torch [0-9.]*, .*' "$BUILD_DIR.configure.log" || echo "(no summary)")
echo "## Build time: $(nproc) cores, ccache disabled, $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes'): $summary"
echo
echo "| step | wall |"
echo "|---|---|"
printf '| configure | %.0f s |\n' "$(echo "$t1 - $t0" | bc)"
printf '| cold build of every target | %.0f s |\n' "$(echo "$t2 - $t1" | bc)"
printf '%s\n' "${touch_rows[@]}"
echo
python3 - "$BUILD_DIR.cold.ninja_log" "$root" <<'PY'
import collections, re, sys
log, root = sys.argv[1], sys.argv[2]
steps = {}
for line in open(log):
    if line.startswith('#'):
        continue
    start, end, _, out, _ = line.rstrip('\n').split('\t')
    steps[out] = (int(end) - int(start)) / 1000.0   # the last record of an output wins
by_folder = collections.Counter()
count = collections.Counter()
rows = []
for out, secs in steps.items():
    m = re.match(r'(?:(.*)/)?CMakeFiles/[^/]+\.dir/(.*)\.o$', out)
    if m:
        src = m.group(2)
        if src.endswith('.pch') or src.endswith('.gch') or 'cmake_pch' in src:
            kind, name = 'pch', (m.group(1) or '.') + '/' + src
        else:
            kind, name = 'compile', (m.group(1) + '/' if m.group(1) else '') + src
    elif out.endswith(('.pch', '.gch')):
        kind, name = 'pch', out
    else:
        kind, name = 'link/other', out
    folder = name.split('/')[0] if kind != 'link/other' else 'links and generated'
    if kind == 'pch':
        folder = 'precompiled headers'
    by_folder[folder] += secs
    count[folder] += 1
    rows.append((secs, name))
total = sum(by_folder.values())
print(f"Compiler and linker time summed over {len(steps)} steps: {total:.0f} s")
print()
print("| folder | steps | seconds |")
print("|---|---|---|")
for folder, secs in by_folder.most_common():
    print(f"| {folder} | {count[folder]} | {secs:.0f} |")
print()
print("| ten slowest steps | seconds |")
print("|---|---|")
for secs, name in sorted(rows, reverse=True)[:10]:
    print(f"| {name} | {secs:.1f} |")
PY
