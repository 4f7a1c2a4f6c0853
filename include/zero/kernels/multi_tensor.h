// The fused multi-tensor Adam's launch list (one AdamShard per shard) and its CPU twin: the CUDA
// launcher (cuda.h) and multi_tensor_adam_cpu take the very same list, so the host code that
// builds it runs in the CPU tests. No CUDA header needed.
#pragma once

#include <cstddef>
#include <cstdint>

#include <zero/kernels/adam.h>

namespace zero::kernels {

enum class DType { kFp32, kFp16, kBf16 };

// One shard of the fused Adam step. Pointers are device pointers for the CUDA launcher, host
// pointers for the CPU twin.
struct AdamShard {
  float* param;       // fp32 master weights, updated in place
  const void* grad;   // `grad_type` elements
  float* exp_avg;     // fp32, updated in place
  float* exp_avg_sq;  // fp32, updated in place
  void* param16;      // `param16_type` copy of the updated param, or nullptr for none
  int64_t numel;
};

// The CPU twin of cuda::launch_multi_tensor_adam: the same step (adam.h's AdamParams) over the
// same list, shard by shard through the vectorized CPU kernels (adam_step_cpu,
// adam_step_cpu_fp32_grad, adam_step_cpu_mixed). param16_type: kFp16 or kBf16 (ignored for
// shards whose param16 is nullptr); UsageError otherwise or for a negative numel.
void multi_tensor_adam_cpu(const AdamParams& p, const AdamShard* shards, size_t count,
                           DType grad_type, DType param16_type);

}  // namespace zero::kernels
