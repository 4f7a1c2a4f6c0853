// qwZ's int8 block quantization on the GPU (the CPU twin: kernels/cpu/quantize.cpp, whose scalar
// references define the bits). One thread block per group: the group's largest magnitude by a
// shared-memory reduction (fmaxf ignores NaN as the reference's std::max does), then the same
// float products with round-to-nearest everywhere (__fmul_rn / __fdiv_rn: no contraction, IEEE
// division whatever the compile flags).
#include "common.cuh"

#include <zero/kernels/quantize.h>

namespace zero::kernels::cuda {
namespace {

using detail::kBlockThreads;

__global__ void __launch_bounds__(kBlockThreads)
    qwz_quantize_kernel(const __half* in, int64_t size, int8_t* q, float* inv_scales) {
  __shared__ float largest[kBlockThreads];
  const int64_t g = blockIdx.x;
  const __half* x = in + g * size;
  float m = 0;
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x) m = fmaxf(m, fabsf(__half2float(x[i])));
  largest[threadIdx.x] = m;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      largest[threadIdx.x] = fmaxf(largest[threadIdx.x], largest[threadIdx.x + half]);
    __syncthreads();
  }
  const float group_max = largest[0];
  const float scale = group_max == 0 ? 1.0f : __fdiv_rn(256.0f, __fmul_rn(2.0f, group_max));
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
    const int r = __float2int_rn(__fmul_rn(__half2float(x[i]), scale));
    q[g * size + i] = static_cast<int8_t>(min(max(r, -128), 127));
  }
  if (threadIdx.x == 0) inv_scales[g] = __fdiv_rn(1.0f, scale);
}

__global__ void __launch_bounds__(kBlockThreads)
    qwz_dequantize_kernel(const int8_t* q, const float* inv_scales, int64_t numel, int64_t size,
                          __half* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += stride)
    out[i] = __float2half_rn(__fmul_rn(static_cast<float>(q[i]), inv_scales[i / size]));
}

void check_groups(int64_t numel, int64_t groups) {
  ZERO_CHECK(groups > 0 && numel % groups == 0, UsageError, "qwZ: ", numel, " elements in ", groups,
             " groups");
  ZERO_CHECK(groups <= INT32_MAX, UsageError, "qwZ: ", groups, " groups in one launch");
}

}  // namespace

void launch_qwz_quantize(const uint16_t* in_fp16, int64_t numel, int64_t groups, int8_t* q,
                         float* inv_scales, cudaStream_t stream) {
  check_groups(numel, groups);
  if (numel == 0) return;
  qwz_quantize_kernel<<<static_cast<unsigned>(groups), kBlockThreads, 0, stream>>>(
      reinterpret_cast<const __half*>(in_fp16), numel / groups, q, inv_scales);
  ZERO_CUDA_CHECK_LAUNCH();
}

void launch_qwz_dequantize(const int8_t* q, const float* inv_scales, int64_t numel, int64_t groups,
                           uint16_t* out_fp16, cudaStream_t stream) {
  check_groups(numel, groups);
  if (numel == 0) return;
  qwz_dequantize_kernel<<<detail::grid_for(numel, kBlockThreads), kBlockThreads, 0, stream>>>(
      q, inv_scales, numel, numel / groups, reinterpret_cast<__half*>(out_fp16));
  ZERO_CUDA_CHECK_LAUNCH();
}

}  // namespace zero::kernels::cuda
