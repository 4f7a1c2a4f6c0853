// The scalar references (plain loops, one thread): the oracle every vectorized CPU kernel and
// every CUDA kernel is tested against; also the Adam scalars and the public half conversions.
#include <cmath>

#include <zero/error.h>
#include <zero/kernels/adam.h>
#include <zero/kernels/math.h>

#include "../adam_scalars.h"
#include "half_scalar.h"

namespace zero::kernels {
namespace detail {

AdamScalars make_adam_scalars(const AdamParams& p) {
  ZERO_CHECK(p.beta1 >= 0.0f && p.beta1 < 1.0f, UsageError, "adam: beta1 must be in [0, 1), got ",
             p.beta1);
  ZERO_CHECK(p.beta2 >= 0.0f && p.beta2 < 1.0f, UsageError, "adam: beta2 must be in [0, 1), got ",
             p.beta2);
  ZERO_CHECK(p.eps >= 0.0f, UsageError, "adam: eps must be >= 0, got ", p.eps);
  ZERO_CHECK(std::isfinite(p.grad_scale) && p.grad_scale > 0.0f, UsageError,
             "adam: grad_scale must be finite and > 0, got ", p.grad_scale);
  ZERO_CHECK(!p.bias_correction || p.step >= 1, UsageError,
             "adam: step is 1-based (the count after increment), got ", p.step);
  double bc1 = 1.0, bc2 = 1.0;
  if (p.bias_correction) {
    bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
    bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  }
  const bool decay = p.weight_decay != 0.0f;
  AdamScalars s{};
  s.inv_grad_scale = static_cast<float>(1.0 / static_cast<double>(p.grad_scale));
  s.has_l2 = decay && !p.adamw_mode;
  s.has_decay = decay && p.adamw_mode;
  s.l2_decay = s.has_l2 ? p.weight_decay : 0.0f;
  s.beta1 = p.beta1;
  s.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(p.beta1));
  s.beta2 = p.beta2;
  s.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(p.beta2));
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.eps = p.eps;
  s.decay_factor =
      s.has_decay ? static_cast<float>(1.0 - static_cast<double>(p.lr) * p.weight_decay) : 1.0f;
  s.step_size = static_cast<float>(static_cast<double>(p.lr) / bc1);
  return s;
}

}  // namespace detail

namespace {

float load16(const uint16_t* data, Half16 type, int64_t i) {
  return half16_to_float(data[i], type);
}

// The reference step on one element, grad already in fp32.
void adam_element(const detail::AdamScalars& s, float& p, float grad, float& m, float& v) {
  float g = grad * s.inv_grad_scale;
  if (s.has_l2) g = g + s.l2_decay * p;
  m = m * s.beta1 + s.one_minus_beta1 * g;
  v = v * s.beta2 + s.one_minus_beta2 * (g * g);
  const float denom = std::sqrt(v) * s.inv_sqrt_bc2 + s.eps;
  if (s.has_decay) p = p * s.decay_factor;
  p = p - s.step_size * (m / denom);
}

void check_scale(float scale, const char* what) {
  ZERO_CHECK(std::isfinite(scale) && scale > 0.0f, UsageError, what,
             ": scale must be finite and > 0, got ", scale);
}

}  // namespace

const char* half16_name(Half16 type) {
  return type == Half16::kFp16 ? "fp16" : "bf16";
}

float half16_to_float(uint16_t bits, Half16 type) {
  return type == Half16::kFp16 ? detail::fp16_to_float(bits) : detail::bf16_to_float(bits);
}

uint16_t float_to_half16(float value, Half16 type) {
  return type == Half16::kFp16 ? detail::float_to_fp16(value) : detail::float_to_bf16(value);
}

void adam_step_reference(const AdamParams& p, float* param, const float* grad, float* exp_avg,
                         float* exp_avg_sq, int64_t numel) {
  const detail::AdamScalars s = detail::make_adam_scalars(p);
  for (int64_t i = 0; i < numel; ++i) adam_element(s, param[i], grad[i], exp_avg[i], exp_avg_sq[i]);
}

void adam_step_reference_mixed(const AdamParams& p, float* param, const uint16_t* grad16,
                               Half16 grad_type, float* exp_avg, float* exp_avg_sq,
                               uint16_t* out_param16, Half16 out_type, int64_t numel) {
  const detail::AdamScalars s = detail::make_adam_scalars(p);
  for (int64_t i = 0; i < numel; ++i) {
    adam_element(s, param[i], load16(grad16, grad_type, i), exp_avg[i], exp_avg_sq[i]);
    if (out_param16) out_param16[i] = float_to_half16(param[i], out_type);
  }
}

void adam_step_reference_fp32_grad(const AdamParams& p, float* param, const float* grad,
                                   float* exp_avg, float* exp_avg_sq, uint16_t* out_param16,
                                   Half16 out_type, int64_t numel) {
  const detail::AdamScalars s = detail::make_adam_scalars(p);
  for (int64_t i = 0; i < numel; ++i) {
    adam_element(s, param[i], grad[i], exp_avg[i], exp_avg_sq[i]);
    if (out_param16) out_param16[i] = float_to_half16(param[i], out_type);
  }
}

bool unscale_reference(float* data, int64_t numel, float scale) {
  check_scale(scale, "unscale_reference");
  const float inv = 1.0f / scale;
  bool found = false;
  for (int64_t i = 0; i < numel; ++i) {
    data[i] = data[i] * inv;
    if (!std::isfinite(data[i])) found = true;
  }
  return found;
}

bool unscale_to_fp32_reference(const uint16_t* in16, Half16 in_type, float* out, int64_t numel,
                               float scale) {
  check_scale(scale, "unscale_to_fp32_reference");
  const float inv = 1.0f / scale;
  bool found = false;
  for (int64_t i = 0; i < numel; ++i) {
    out[i] = load16(in16, in_type, i) * inv;
    if (!std::isfinite(out[i])) found = true;
  }
  return found;
}

bool has_non_finite_reference(const float* data, int64_t numel) {
  for (int64_t i = 0; i < numel; ++i) {
    if (!std::isfinite(data[i])) return true;
  }
  return false;
}

bool has_non_finite_reference(const uint16_t* data16, Half16 type, int64_t numel) {
  for (int64_t i = 0; i < numel; ++i) {
    if (!std::isfinite(load16(data16, type, i))) return true;
  }
  return false;
}

double sum_squares_reference(const float* data, int64_t numel) {
  double sum = 0.0;
  for (int64_t i = 0; i < numel; ++i) sum += static_cast<double>(data[i]) * data[i];
  return sum;
}

double sum_squares_reference(const uint16_t* data16, Half16 type, int64_t numel) {
  double sum = 0.0;
  for (int64_t i = 0; i < numel; ++i) {
    const double x = load16(data16, type, i);
    sum += x * x;
  }
  return sum;
}

void scale_reference(float* data, int64_t numel, float factor) {
  for (int64_t i = 0; i < numel; ++i) data[i] = data[i] * factor;
}

void cast_to_half16_reference(const float* in, uint16_t* out, Half16 out_type, int64_t numel) {
  for (int64_t i = 0; i < numel; ++i) out[i] = float_to_half16(in[i], out_type);
}

void cast_from_half16_reference(const uint16_t* in, Half16 in_type, float* out, int64_t numel) {
  for (int64_t i = 0; i < numel; ++i) out[i] = half16_to_float(in[i], in_type);
}

}  // namespace zero::kernels
