// Adam / AdamW steps over one flat fp32 shard on the CPU: the vectorized kernel (AVX-512,
// AVX2+FMA or scalar, chosen at run time) and the plain-loop reference that tests trust.
#pragma once

#include <cstdint>

#include <zero/kernels/half.h>

namespace zero::kernels {

// One step's hyper-parameters. Per element (the order DeepSpeed's CPU Adam and
// torch::optim::Adam/AdamW use):
//   g  = grad / grad_scale                          (multiplied by 1/grad_scale)
//   g += weight_decay * p                           (Adam, adamw_mode == false: L2)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g * g
//   denom = sqrt(v) / sqrt(1 - beta2^step) + eps
//   p *= 1 - lr * weight_decay                      (AdamW, adamw_mode == true: decoupled)
//   p -= lr / (1 - beta1^step) * m / denom
// Without bias_correction both corrections are 1. Scalars are derived in double once per call.
struct AdamParams {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  bool adamw_mode;
  bool bias_correction = true;
  int64_t step;             // 1-based step count after increment
  float grad_scale = 1.0f;  // gradients are divided by this (fused unscale)
};

// Vectorized CPU Adam/AdamW over one flat fp32 shard (in place on param, exp_avg,
// exp_avg_sq). Large shards are split over cpu_threads() threads (see cpu.h).
void adam_step_cpu(const AdamParams& p, float* param, const float* grad, float* exp_avg,
                   float* exp_avg_sq, int64_t numel);

// The scalar reference: the test oracle. Same math, plain loops, one thread.
void adam_step_reference(const AdamParams& p, float* param, const float* grad, float* exp_avg,
                         float* exp_avg_sq, int64_t numel);

// Mixed precision: 16-bit gradients in (fp16/bf16 bits), fp32 master weights and moments
// updated in place, and optionally the updated parameter written as a 16-bit copy in the
// same pass (out_param16 == nullptr: none).
void adam_step_cpu_mixed(const AdamParams& p, float* param, const uint16_t* grad16,
                         Half16 grad_type, float* exp_avg, float* exp_avg_sq, uint16_t* out_param16,
                         Half16 out_type, int64_t numel);

void adam_step_reference_mixed(const AdamParams& p, float* param, const uint16_t* grad16,
                               Half16 grad_type, float* exp_avg, float* exp_avg_sq,
                               uint16_t* out_param16, Half16 out_type, int64_t numel);

// fp32 gradients in, optional 16-bit parameter copy out (bf16/fp16 training with fp32
// gradient accumulation).
void adam_step_cpu_fp32_grad(const AdamParams& p, float* param, const float* grad, float* exp_avg,
                             float* exp_avg_sq, uint16_t* out_param16, Half16 out_type,
                             int64_t numel);

void adam_step_reference_fp32_grad(const AdamParams& p, float* param, const float* grad,
                                   float* exp_avg, float* exp_avg_sq, uint16_t* out_param16,
                                   Half16 out_type, int64_t numel);

}  // namespace zero::kernels
