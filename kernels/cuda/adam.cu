// The multi-tensor fused Adam/AdamW step: shards are packed kMaxTensorsPerLaunch at a time
// into the kernel's parameter block and cut into chunks that blocks sweep in a grid-stride
// loop; the per-element math is the reference's (kernels/cpu/reference.cpp).
#include <algorithm>
#include <vector>

#include "../adam_scalars.h"
#include "common.cuh"

namespace zero::kernels::cuda {
namespace {

using detail::kBlockThreads;
using kernels::detail::AdamScalars;

constexpr int64_t kChunkNumel = 16384;  // a multiple of 4: chunks keep 4-element alignment

struct AdamLaunch {
  float* param[kMaxTensorsPerLaunch];
  const void* grad[kMaxTensorsPerLaunch];
  float* exp_avg[kMaxTensorsPerLaunch];
  float* exp_avg_sq[kMaxTensorsPerLaunch];
  void* param16[kMaxTensorsPerLaunch];
  int64_t numel[kMaxTensorsPerLaunch];
  int64_t first_chunk[kMaxTensorsPerLaunch + 1];  // prefix sums of each tensor's chunk count
  uint32_t vector_ok;                             // bit t: tensor t takes 4-element accesses
  int count;
};

__device__ __forceinline__ void adam_element(const AdamScalars& s, float& p, float grad, float& m,
                                             float& v) {
  float g = grad * s.inv_grad_scale;
  if (s.has_l2) g = g + s.l2_decay * p;
  m = m * s.beta1 + s.one_minus_beta1 * g;
  v = v * s.beta2 + s.one_minus_beta2 * (g * g);
  const float denom = sqrtf(v) * s.inv_sqrt_bc2 + s.eps;
  if (s.has_decay) p = p * s.decay_factor;
  p = p - s.step_size * (m / denom);
}

template <typename GradT, typename OutT>
__global__ void __launch_bounds__(kBlockThreads)
    multi_tensor_adam_kernel(const __grid_constant__ AdamLaunch args, const AdamScalars s) {
  const int64_t total_chunks = args.first_chunk[args.count];
  for (int64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
    int t = 0;
    while (args.first_chunk[t + 1] <= chunk) ++t;
    const int64_t begin = (chunk - args.first_chunk[t]) * kChunkNumel;
    const int64_t end = min(args.numel[t], begin + kChunkNumel);
    float* p = args.param[t];
    const GradT* g = static_cast<const GradT*>(args.grad[t]);
    float* m = args.exp_avg[t];
    float* v = args.exp_avg_sq[t];
    OutT* out = static_cast<OutT*>(args.param16[t]);
    int64_t i = begin + 4 * static_cast<int64_t>(threadIdx.x);
    if (args.vector_ok & (1u << t)) {
      for (; i + 3 < end; i += 4 * static_cast<int64_t>(blockDim.x)) {
        float rp[4], rg[4], rm[4], rv[4];
        detail::load4(p + i, rp);
        detail::load4(g + i, rg);
        detail::load4(m + i, rm);
        detail::load4(v + i, rv);
#pragma unroll
        for (int k = 0; k < 4; ++k) adam_element(s, rp[k], rg[k], rm[k], rv[k]);
        detail::store4(p + i, rp);
        detail::store4(m + i, rm);
        detail::store4(v + i, rv);
        if (out != nullptr) detail::store4(out + i, rp);
      }
      // The tail (< 4 elements past the last full group of the chunk), one per thread.
      i = begin + (end - begin) / 4 * 4 + threadIdx.x;
    } else {
      i = begin + threadIdx.x;
    }
    for (; i < end; i += blockDim.x) {
      float rp = p[i], rm = m[i], rv = v[i];
      adam_element(s, rp, detail::to_float(g[i]), rm, rv);
      p[i] = rp;
      m[i] = rm;
      v[i] = rv;
      if (out != nullptr) out[i] = detail::from_float<OutT>(rp);
    }
  }
}

template <typename GradT, typename OutT>
void launch_typed(const AdamLaunch& args, const AdamScalars& s, cudaStream_t stream) {
  const int64_t chunks = args.first_chunk[args.count];
  const int grid = static_cast<int>(std::min<int64_t>(chunks, detail::kMaxBlocks));
  multi_tensor_adam_kernel<GradT, OutT><<<grid, kBlockThreads, 0, stream>>>(args, s);
  ZERO_CUDA_CHECK_LAUNCH();
}

template <typename GradT>
void launch_grad(const AdamLaunch& args, const AdamScalars& s, DType param16_type,
                 cudaStream_t stream) {
  if (param16_type == DType::kBf16) {
    launch_typed<GradT, __nv_bfloat16>(args, s, stream);
  } else {
    launch_typed<GradT, __half>(args, s, stream);
  }
}

}  // namespace

const char* dtype_name(DType type) {
  switch (type) {
    case DType::kFp32:
      return "fp32";
    case DType::kFp16:
      return "fp16";
    default:
      return "bf16";
  }
}

size_t dtype_bytes(DType type) {
  return type == DType::kFp32 ? 4 : 2;
}

void launch_multi_tensor_adam(const AdamParams& p, const AdamShard* shards, size_t count,
                              DType grad_type, DType param16_type, cudaStream_t stream) {
  ZERO_CHECK(param16_type != DType::kFp32, UsageError,
             "launch_multi_tensor_adam: param16_type must be fp16 or bf16");
  const AdamScalars s = kernels::detail::make_adam_scalars(p);
  const size_t grad_bytes = dtype_bytes(grad_type);
  size_t next = 0;
  while (next < count) {
    AdamLaunch args{};
    args.first_chunk[0] = 0;
    while (next < count && args.count < kMaxTensorsPerLaunch) {
      const AdamShard& sh = shards[next++];
      ZERO_CHECK(sh.numel >= 0, UsageError, "launch_multi_tensor_adam: negative numel");
      if (sh.numel == 0) continue;
      ZERO_CHECK(sh.param && sh.grad && sh.exp_avg && sh.exp_avg_sq, UsageError,
                 "launch_multi_tensor_adam: null pointer in shard ", next - 1);
      const int t = args.count++;
      args.param[t] = sh.param;
      args.grad[t] = sh.grad;
      args.exp_avg[t] = sh.exp_avg;
      args.exp_avg_sq[t] = sh.exp_avg_sq;
      args.param16[t] = sh.param16;
      args.numel[t] = sh.numel;
      args.first_chunk[t + 1] = args.first_chunk[t] + (sh.numel + kChunkNumel - 1) / kChunkNumel;
      const bool ok = detail::aligned(sh.param, 16) && detail::aligned(sh.exp_avg, 16) &&
                      detail::aligned(sh.exp_avg_sq, 16) &&
                      detail::aligned(sh.grad, 4 * grad_bytes) &&
                      (sh.param16 == nullptr || detail::aligned(sh.param16, 8));
      if (ok) args.vector_ok |= 1u << t;
    }
    if (args.count == 0) continue;
    switch (grad_type) {
      case DType::kFp32:
        launch_grad<float>(args, s, param16_type, stream);
        break;
      case DType::kFp16:
        launch_grad<__half>(args, s, param16_type, stream);
        break;
      case DType::kBf16:
        launch_grad<__nv_bfloat16>(args, s, param16_type, stream);
        break;
    }
  }
}

}  // namespace zero::kernels::cuda
