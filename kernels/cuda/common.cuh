// Shared pieces of the CUDA kernels: the launch check that throws CudaError with file, line
// and cudaGetErrorString, element conversions, and aligned 4-element vector loads/stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include <zero/error.h>
#include <zero/kernels/cuda.h>

#define ZERO_CUDA_CHECK(expr)                                                                 \
  do {                                                                                        \
    const cudaError_t zero_cuda_err_ = (expr);                                                \
    if (zero_cuda_err_ != cudaSuccess) {                                                      \
      throw ::zero::CudaError(::zero::detail::str(__FILE__, ":", __LINE__, ": ", #expr, ": ", \
                                                  cudaGetErrorName(zero_cuda_err_), ": ",     \
                                                  cudaGetErrorString(zero_cuda_err_)));       \
    }                                                                                         \
  } while (0)

// After every kernel launch: configuration errors surface at once.
#define ZERO_CUDA_CHECK_LAUNCH() ZERO_CUDA_CHECK(cudaGetLastError())

namespace zero::kernels::cuda::detail {

constexpr int kBlockThreads = 256;
constexpr int kMaxBlocks = 4096;  // grid-stride loops cover the rest

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Four consecutive elements as one aligned access: 16 bytes for fp32, 8 bytes for 16-bit.
template <typename T>
struct Pack4;
template <>
struct Pack4<float> {
  using Raw = float4;
};
template <>
struct Pack4<__half> {
  using Raw = uint2;
};
template <>
struct Pack4<__nv_bfloat16> {
  using Raw = uint2;
};

template <typename T>
__device__ __forceinline__ void load4(const T* p, float out[4]) {
  const typename Pack4<T>::Raw raw = *reinterpret_cast<const typename Pack4<T>::Raw*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) out[k] = to_float(e[k]);
}

template <typename T>
__device__ __forceinline__ void store4(T* p, const float in[4]) {
  typename Pack4<T>::Raw raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) e[k] = from_float<T>(in[k]);
  *reinterpret_cast<typename Pack4<T>::Raw*>(p) = raw;
}

inline bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

inline int grid_for(int64_t work_items, int64_t per_block) {
  const int64_t blocks = (work_items + per_block - 1) / per_block;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

}  // namespace zero::kernels::cuda::detail
