#!/usr/bin/env bash
# zero_report.sh ZERO VERSION CUDA_ARCHS: `zero report` prints the build's own facts: the project
# version CMake has, the CUDA architectures the kernels were compiled for (when built with CUDA),
# and the SIMD level the CPU kernels dispatch to, which ZERO_CPU_SIMD lowers.
set -euo pipefail
zero=$1; version=$2; archs=$3
out=$("$zero" report)
echo "$out"
grep -qE "^  zero +$version\$" <<<"$out" || { echo "FAIL: version row is not $version"; exit 1; }
simd=$(grep -E '^  CPU SIMD ' <<<"$out" | awk '{print $3}')
case "$simd" in scalar|avx2|avx512) ;; *) echo "FAIL: CPU SIMD row names '$simd'"; exit 1 ;; esac
low=$(ZERO_CPU_SIMD=scalar "$zero" report | grep -E '^  CPU SIMD ')
grep -qE "^  CPU SIMD +scalar" <<<"$low" || { echo "FAIL: ZERO_CPU_SIMD=scalar not shown: $low"; exit 1; }
if [ "$simd" != scalar ]; then
  grep -q "this CPU supports $simd, lowered by ZERO_CPU_SIMD" <<<"$low" || { echo "FAIL: $low"; exit 1; }
fi
if [ -n "$archs" ]; then
  first=${archs%%,*}; first=${first%%-*}
  grep -qE "^  CUDA kernels +compiled for sm_$first" <<<"$out" || { echo "FAIL: CUDA kernels row lacks sm_$first (built for $archs)"; exit 1; }
fi
echo "PASS"
