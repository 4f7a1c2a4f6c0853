// The table of range kernels that each SIMD level provides (scalar, AVX2, AVX-512): the
// dispatcher picks a table at run time and calls its entries on thread-sized ranges.
#pragma once

#include <cstdint>

#include "../adam_scalars.h"

namespace zero::kernels::detail {

// Element formats of a kernel's input or optional output.
enum ElemKind : int { kElemF32 = 0, kElemF16 = 1, kElemBf16 = 2, kElemNone = 3 };

struct AdamArgs {
  float* param;
  const void* grad;  // float / uint16_t fp16 / uint16_t bf16, by the table entry's grad kind
  float* exp_avg;
  float* exp_avg_sq;
  void* out16;  // uint16_t fp16 / bf16 copy of the updated param, or nullptr
};

// Every entry works on the elements [begin, end) of its buffers.
using AdamFn = void (*)(const AdamScalars& s, const AdamArgs& a, int64_t begin, int64_t end);
using FloorFn = void (*)(const AdamArgs& a, int64_t begin, int64_t end);
using UnscaleFn = bool (*)(const void* in, float* out, float inv_scale, int64_t begin, int64_t end);
using NonFiniteFn = bool (*)(const void* in, int64_t begin, int64_t end);
using SumSquaresFn = double (*)(const void* in, int64_t begin, int64_t end);
using ScaleFn = void (*)(float* data, float factor, int64_t begin, int64_t end);
using CastFn = void (*)(const void* in, void* out, int64_t begin, int64_t end);

struct KernelTable {
  AdamFn adam[3][4];  // [grad kind: F32/F16/Bf16][out kind: F32 unused, F16, Bf16, None]
  FloorFn access_floor;
  UnscaleFn unscale[3];         // [in kind]; out is always fp32
  NonFiniteFn non_finite[3];    // [in kind]
  SumSquaresFn sum_squares[3];  // [in kind]
  ScaleFn scale;
  CastFn to_half16[3];    // [out kind F16/Bf16] (index 0 unused)
  CastFn from_half16[3];  // [in kind F16/Bf16] (index 0 unused)
};

const KernelTable& scalar_kernel_table();
const KernelTable& avx2_kernel_table();    // only on x86-64
const KernelTable& avx512_kernel_table();  // only on x86-64

}  // namespace zero::kernels::detail
