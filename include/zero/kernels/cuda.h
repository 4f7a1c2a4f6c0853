// Launchers of the fused CUDA kernels (only when ZERO_HAS_CUDA): multi-tensor Adam/AdamW with
// 16-bit or fp32 gradients and an optional 16-bit parameter copy, unscale + non-finite check,
// multi-tensor sum of squares (L2 norm), casts and scaling. Each has a CPU twin in adam.h /
// math.h with the same math. All pointers are device pointers; every launcher only enqueues
// work on `stream` (the host never waits) and throws CudaError (file, line, cudaGetErrorString)
// when a launch fails.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include <zero/kernels/adam.h>
#include <zero/kernels/multi_tensor.h>

namespace zero::kernels::cuda {

using kernels::DType;  // multi_tensor.h: shared with the CPU twin
const char* dtype_name(DType type);
size_t dtype_bytes(DType type);

// Tensors per launch of the multi-tensor kernels: a list of N shards takes ceil(N / this)
// launches (their pointers travel in the kernel's parameter block).
constexpr int kMaxTensorsPerLaunch = 32;

// One shard of the fused Adam step (multi_tensor.h; kernels::multi_tensor_adam_cpu runs the same
// list on the CPU).
using kernels::AdamShard;

// The step of adam.h's AdamParams for every shard. grad_type: any; param16_type: kFp16 or
// kBf16 (ignored for shards whose param16 is nullptr). 16-byte accesses where every pointer
// of a shard is 16-byte aligned (8 bytes for 16-bit arrays), element-wise otherwise.
void launch_multi_tensor_adam(const AdamParams& p, const AdamShard* shards, size_t count,
                              DType grad_type, DType param16_type, cudaStream_t stream);

// out[i] = float(in[i]) * (1 / scale); when any result is inf or NaN, sets
// *found_non_finite = 1 (a device int that the caller zeroes beforehand, so several calls
// accumulate; it is never cleared here). `in` may equal `out` when in_type is kFp32.
void launch_unscale_check(const void* in, DType in_type, float* out, int64_t numel, float scale,
                          int* found_non_finite, cudaStream_t stream);

// Sets *found_non_finite = 1 when any element of `in` is inf or NaN (never clears it).
void launch_non_finite_check(const void* in, DType in_type, int64_t numel, int* found_non_finite,
                             cudaStream_t stream);

struct ConstBuffer {
  const void* data;
  int64_t numel;
};

// Doubles of device workspace launch_multi_tensor_sum_squares needs.
constexpr int64_t kSumSquaresWorkspaceNumel = 1024;

// *out_sum_sq (device double) = sum over all buffers of x^2, accumulated in double in a fixed
// order (deterministic for a given device and list). The L2 norm is its square root.
void launch_multi_tensor_sum_squares(const ConstBuffer* buffers, size_t count, DType type,
                                     double* out_sum_sq, double* workspace, cudaStream_t stream);

// out = in converted: fp32 -> fp16/bf16 round-to-nearest-even, fp16/bf16 -> fp32 exact, same
// type: a copy. 16-bit <-> other 16-bit is rejected (UsageError).
void launch_cast(const void* in, DType in_type, void* out, DType out_type, int64_t numel,
                 cudaStream_t stream);

// data *= factor.
void launch_scale(float* data, int64_t numel, float factor, cudaStream_t stream);

// qwZ (quantize.h): quantize_int8_symmetric_reference and dequantize_int8_symmetric_reference on
// the device, with their bits (one thread block per group).
void launch_qwz_quantize(const uint16_t* in_fp16, int64_t numel, int64_t groups, int8_t* q,
                         float* inv_scales, cudaStream_t stream);
void launch_qwz_dequantize(const int8_t* q, const float* inv_scales, int64_t numel, int64_t groups,
                           uint16_t* out_fp16, cudaStream_t stream);

}  // namespace zero::kernels::cuda
