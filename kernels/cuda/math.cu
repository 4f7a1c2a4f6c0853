// Flat-buffer CUDA kernels of mixed precision: unscale + non-finite check, the non-finite check
// alone, multi-tensor sum of squares (two deterministic stages), casts and scaling. Grid-stride
// loops over 4-element groups (16-byte fp32 accesses) when the buffers allow it.
#include <algorithm>
#include <cmath>

#include "common.cuh"

namespace zero::kernels::cuda {
namespace {

using detail::kBlockThreads;

__device__ __forceinline__ bool non_finite(float x) {
  return !isfinite(x);
}

// Calls fn(i0, n_in_group, vectorized) for groups of 4 elements in a grid-stride loop; the
// remainder (numel % 4) goes to the first threads of block 0 element by element.
template <typename Fn>
__device__ __forceinline__ void for_each_group(int64_t numel, bool vectorized, Fn&& fn) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vectorized) {
    const int64_t groups = numel / 4;
    for (int64_t gidx = first; gidx < groups; gidx += stride) fn(4 * gidx, true);
    for (int64_t i = groups * 4 + first; i < numel; i += stride) fn(i, false);
  } else {
    for (int64_t i = first; i < numel; i += stride) fn(i, false);
  }
}

template <typename InT>
__global__ void __launch_bounds__(kBlockThreads)
    unscale_kernel(const InT* in, float* out, int64_t numel, float inv_scale, bool vectorized,
                   int* found) {
  bool bad = false;
  for_each_group(numel, vectorized, [&](int64_t i, bool four) {
    if (four) {
      float x[4];
      detail::load4(in + i, x);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        x[k] = x[k] * inv_scale;
        bad |= non_finite(x[k]);
      }
      detail::store4(out + i, x);
    } else {
      const float y = detail::to_float(in[i]) * inv_scale;
      out[i] = y;
      bad |= non_finite(y);
    }
  });
  if (bad) *reinterpret_cast<volatile int*>(found) = 1;
}

template <typename InT>
__global__ void __launch_bounds__(kBlockThreads)
    non_finite_kernel(const InT* in, int64_t numel, bool vectorized, int* found) {
  bool bad = false;
  for_each_group(numel, vectorized, [&](int64_t i, bool four) {
    if (four) {
      float x[4];
      detail::load4(in + i, x);
#pragma unroll
      for (int k = 0; k < 4; ++k) bad |= non_finite(x[k]);
    } else {
      bad |= non_finite(detail::to_float(in[i]));
    }
  });
  if (bad) *reinterpret_cast<volatile int*>(found) = 1;
}

template <typename InT, typename OutT>
__global__ void __launch_bounds__(kBlockThreads)
    cast_kernel(const InT* in, OutT* out, int64_t numel, bool vectorized) {
  for_each_group(numel, vectorized, [&](int64_t i, bool four) {
    if (four) {
      float x[4];
      detail::load4(in + i, x);
      detail::store4(out + i, x);
    } else {
      out[i] = detail::from_float<OutT>(detail::to_float(in[i]));
    }
  });
}

__global__ void __launch_bounds__(kBlockThreads)
    scale_kernel(float* data, int64_t numel, float factor, bool vectorized) {
  for_each_group(numel, vectorized, [&](int64_t i, bool four) {
    if (four) {
      float x[4];
      detail::load4(data + i, x);
#pragma unroll
      for (int k = 0; k < 4; ++k) x[k] = x[k] * factor;
      detail::store4(data + i, x);
    } else {
      data[i] = data[i] * factor;
    }
  });
}

// Block-wide sum of one double per thread, fixed order; the result is valid in thread 0.
__device__ double block_sum(double x) {
  __shared__ double shared[kBlockThreads];
  shared[threadIdx.x] = x;
  __syncthreads();
  for (int width = kBlockThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  return shared[0];
}

struct SumSquaresLaunch {
  const void* data[kMaxTensorsPerLaunch];
  int64_t numel[kMaxTensorsPerLaunch];
  int count;
};

// Stage 1: block b sums its grid-stride share of every buffer into workspace[b].
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    sum_squares_partial_kernel(const __grid_constant__ SumSquaresLaunch args, double* workspace) {
  double acc = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int t = 0; t < args.count; ++t) {
    const T* x = static_cast<const T*>(args.data[t]);
    for (int64_t i = first; i < args.numel[t]; i += stride) {
      const double v = detail::to_float(x[i]);
      acc += v * v;
    }
  }
  const double sum = block_sum(acc);
  if (threadIdx.x == 0) workspace[blockIdx.x] = sum;
}

// Stage 2: one block sums the partials in a fixed order; the first launch of a list writes
// *out, later ones add to it (same stream: ordered, deterministic).
__global__ void __launch_bounds__(kBlockThreads)
    sum_squares_final_kernel(const double* workspace, int partials, double* out, bool accumulate) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < partials; i += blockDim.x) acc += workspace[i];
  const double sum = block_sum(acc);
  if (threadIdx.x == 0) *out = accumulate ? *out + sum : sum;
}

void check_scale(float scale, const char* what) {
  ZERO_CHECK(std::isfinite(scale) && scale > 0.0f, UsageError, what,
             ": scale must be finite and > 0, got ", scale);
}

}  // namespace

void launch_unscale_check(const void* in, DType in_type, float* out, int64_t numel, float scale,
                          int* found_non_finite, cudaStream_t stream) {
  ZERO_CHECK(numel >= 0, UsageError, "launch_unscale_check: negative numel");
  check_scale(scale, "launch_unscale_check");
  if (numel == 0) return;
  const float inv = 1.0f / scale;
  const bool vec = detail::aligned(in, 4 * dtype_bytes(in_type)) && detail::aligned(out, 16);
  const int grid = detail::grid_for(numel, 4 * kBlockThreads);
  switch (in_type) {
    case DType::kFp32:
      unscale_kernel<<<grid, kBlockThreads, 0, stream>>>(static_cast<const float*>(in), out, numel,
                                                         inv, vec, found_non_finite);
      break;
    case DType::kFp16:
      unscale_kernel<<<grid, kBlockThreads, 0, stream>>>(static_cast<const __half*>(in), out, numel,
                                                         inv, vec, found_non_finite);
      break;
    case DType::kBf16:
      unscale_kernel<<<grid, kBlockThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(in), out,
                                                         numel, inv, vec, found_non_finite);
      break;
  }
  ZERO_CUDA_CHECK_LAUNCH();
}

void launch_non_finite_check(const void* in, DType in_type, int64_t numel, int* found_non_finite,
                             cudaStream_t stream) {
  ZERO_CHECK(numel >= 0, UsageError, "launch_non_finite_check: negative numel");
  if (numel == 0) return;
  const bool vec = detail::aligned(in, 4 * dtype_bytes(in_type));
  const int grid = detail::grid_for(numel, 4 * kBlockThreads);
  switch (in_type) {
    case DType::kFp32:
      non_finite_kernel<<<grid, kBlockThreads, 0, stream>>>(static_cast<const float*>(in), numel,
                                                            vec, found_non_finite);
      break;
    case DType::kFp16:
      non_finite_kernel<<<grid, kBlockThreads, 0, stream>>>(static_cast<const __half*>(in), numel,
                                                            vec, found_non_finite);
      break;
    case DType::kBf16:
      non_finite_kernel<<<grid, kBlockThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(in),
                                                            numel, vec, found_non_finite);
      break;
  }
  ZERO_CUDA_CHECK_LAUNCH();
}

void launch_multi_tensor_sum_squares(const ConstBuffer* buffers, size_t count, DType type,
                                     double* out_sum_sq, double* workspace, cudaStream_t stream) {
  constexpr int grid = static_cast<int>(kSumSquaresWorkspaceNumel);
  static_assert(kSumSquaresWorkspaceNumel <= detail::kMaxBlocks, "one partial per block");
  size_t next = 0;
  bool accumulate = false;
  do {
    SumSquaresLaunch args{};
    while (next < count && args.count < kMaxTensorsPerLaunch) {
      const ConstBuffer& b = buffers[next++];
      ZERO_CHECK(b.numel >= 0, UsageError, "launch_multi_tensor_sum_squares: negative numel");
      if (b.numel == 0) continue;
      args.data[args.count] = b.data;
      args.numel[args.count] = b.numel;
      ++args.count;
    }
    // An empty list still writes 0 to *out_sum_sq (one launch with no buffers).
    switch (type) {
      case DType::kFp32:
        sum_squares_partial_kernel<float><<<grid, kBlockThreads, 0, stream>>>(args, workspace);
        break;
      case DType::kFp16:
        sum_squares_partial_kernel<__half><<<grid, kBlockThreads, 0, stream>>>(args, workspace);
        break;
      case DType::kBf16:
        sum_squares_partial_kernel<__nv_bfloat16>
            <<<grid, kBlockThreads, 0, stream>>>(args, workspace);
        break;
    }
    ZERO_CUDA_CHECK_LAUNCH();
    sum_squares_final_kernel<<<1, kBlockThreads, 0, stream>>>(workspace, grid, out_sum_sq,
                                                              accumulate);
    ZERO_CUDA_CHECK_LAUNCH();
    accumulate = true;
  } while (next < count);
}

void launch_cast(const void* in, DType in_type, void* out, DType out_type, int64_t numel,
                 cudaStream_t stream) {
  ZERO_CHECK(numel >= 0, UsageError, "launch_cast: negative numel");
  ZERO_CHECK(in_type == out_type || in_type == DType::kFp32 || out_type == DType::kFp32, UsageError,
             "launch_cast: ", dtype_name(in_type), " -> ", dtype_name(out_type),
             " is not supported (one side must be fp32)");
  if (numel == 0) return;
  if (in_type == out_type) {
    ZERO_CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<size_t>(numel) * dtype_bytes(in_type),
                                    cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const bool vec = detail::aligned(in, 4 * dtype_bytes(in_type)) &&
                   detail::aligned(out, 4 * dtype_bytes(out_type));
  const int grid = detail::grid_for(numel, 4 * kBlockThreads);
  const float* in32 = static_cast<const float*>(in);
  float* out32 = static_cast<float*>(out);
  if (in_type == DType::kFp32 && out_type == DType::kFp16) {
    cast_kernel<<<grid, kBlockThreads, 0, stream>>>(in32, static_cast<__half*>(out), numel, vec);
  } else if (in_type == DType::kFp32) {
    cast_kernel<<<grid, kBlockThreads, 0, stream>>>(in32, static_cast<__nv_bfloat16*>(out), numel,
                                                    vec);
  } else if (in_type == DType::kFp16) {
    cast_kernel<<<grid, kBlockThreads, 0, stream>>>(static_cast<const __half*>(in), out32, numel,
                                                    vec);
  } else {
    cast_kernel<<<grid, kBlockThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(in), out32,
                                                    numel, vec);
  }
  ZERO_CUDA_CHECK_LAUNCH();
}

void launch_scale(float* data, int64_t numel, float factor, cudaStream_t stream) {
  ZERO_CHECK(numel >= 0, UsageError, "launch_scale: negative numel");
  if (numel == 0) return;
  const int grid = detail::grid_for(numel, 4 * kBlockThreads);
  scale_kernel<<<grid, kBlockThreads, 0, stream>>>(data, numel, factor, detail::aligned(data, 16));
  ZERO_CUDA_CHECK_LAUNCH();
}

}  // namespace zero::kernels::cuda
