// Element-wise helpers of mixed precision on flat CPU buffers: unscale + non-finite check,
// sum of squares (for global-norm clipping), in-place scaling and fp32 <-> fp16/bf16 casts.
// Each has a vectorized _cpu version and a plain-loop _reference version (the test oracle).
#pragma once

#include <cstdint>

#include <zero/kernels/half.h>

namespace zero::kernels {

// data *= 1/scale in place; returns true when any result is inf or NaN (found_inf).
bool unscale_cpu(float* data, int64_t numel, float scale);
bool unscale_reference(float* data, int64_t numel, float scale);

// out = float(in16) * (1/scale); returns true when any result is inf or NaN.
bool unscale_to_fp32_cpu(const uint16_t* in16, Half16 in_type, float* out, int64_t numel,
                         float scale);
bool unscale_to_fp32_reference(const uint16_t* in16, Half16 in_type, float* out, int64_t numel,
                               float scale);

// True when any element is inf or NaN.
bool has_non_finite_cpu(const float* data, int64_t numel);
bool has_non_finite_reference(const float* data, int64_t numel);
bool has_non_finite_cpu(const uint16_t* data16, Half16 type, int64_t numel);
bool has_non_finite_reference(const uint16_t* data16, Half16 type, int64_t numel);

// Sum of squares accumulated in double (the L2 norm is its square root). The vectorized
// version sums in a different order than the reference: equal to ~1e-12 relative.
double sum_squares_cpu(const float* data, int64_t numel);
double sum_squares_reference(const float* data, int64_t numel);
double sum_squares_cpu(const uint16_t* data16, Half16 type, int64_t numel);
double sum_squares_reference(const uint16_t* data16, Half16 type, int64_t numel);

// data *= factor in place.
void scale_cpu(float* data, int64_t numel, float factor);
void scale_reference(float* data, int64_t numel, float factor);

// fp32 -> 16-bit with round-to-nearest-even, and the exact widening back.
void cast_to_half16_cpu(const float* in, uint16_t* out, Half16 out_type, int64_t numel);
void cast_to_half16_reference(const float* in, uint16_t* out, Half16 out_type, int64_t numel);
void cast_from_half16_cpu(const uint16_t* in, Half16 in_type, float* out, int64_t numel);
void cast_from_half16_reference(const uint16_t* in, Half16 in_type, float* out, int64_t numel);

}  // namespace zero::kernels
