// The per-call scalars of an Adam step, derived once (in double) from AdamParams and shared by
// the reference, the vectorized CPU kernels and the CUDA kernels so all three use one math.
#pragma once

#include <zero/kernels/adam.h>

namespace zero::kernels::detail {

struct AdamScalars {
  float inv_grad_scale;  // 1 / grad_scale
  float l2_decay;        // weight_decay when !adamw_mode (added to the gradient), else 0
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^step)
  float eps;
  float decay_factor;  // 1 - lr * weight_decay when adamw_mode, else 1
  float step_size;     // lr / (1 - beta1^step)
  bool has_l2;
  bool has_decay;
};

// Validates `p` (UsageError on a bad step, beta, eps or grad_scale) and derives the scalars.
AdamScalars make_adam_scalars(const AdamParams& p);

}  // namespace zero::kernels::detail
