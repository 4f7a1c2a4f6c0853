// Target regions for the vectorized kernels: code between ZERO_SIMD_BEGIN_<ISA> and
// ZERO_SIMD_END is compiled for that ISA (function-level target attributes, GCC and Clang),
// so one binary holds every level and picks one at run time; no -march flags anywhere.
#pragma once

#if defined(__x86_64__) || defined(_M_X64)
#define ZERO_SIMD_X86 1
#include <immintrin.h>
#else
#define ZERO_SIMD_X86 0
#endif

#define ZERO_SIMD_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define ZERO_SIMD_BEGIN(isa) \
  ZERO_SIMD_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define ZERO_SIMD_END _Pragma("clang attribute pop")
#else
#define ZERO_SIMD_BEGIN(isa) _Pragma("GCC push_options") ZERO_SIMD_PRAGMA(GCC target(isa))
#define ZERO_SIMD_END _Pragma("GCC pop_options")
#endif

#define ZERO_SIMD_ISA_AVX2 "avx2,fma,f16c"
#define ZERO_SIMD_ISA_AVX512 "avx512f,avx2,fma,f16c"
