// ZeRO++ qwZ (zero_quantized_weights): DeepSpeed's symmetric int8 block quantization of the
// parameters it all-gathers, as its CUDAQuantizer and csrc/quantization kernels define it.
// Values are read as fp16 (DeepSpeed's kernel reads __half: callers convert fp32 and bf16 to fp16
// first, as its quantize() does). The _reference functions are the scalar definitions; the _cpu
// ones (AVX2 with F16C where available, threaded) produce the same bits.
#pragma once

#include <cstdint>

namespace zero::kernels {

// The groups DeepSpeed's CUDAQuantizer.quantize picks for `numel` elements: from
// ceil(numel / 8000) up to the first count g with numel % (8 g) == 0, then doubled while
// numel % (16 g) == 0 and numel / g > 8000. UsageError for what DeepSpeed asserts against
// (numel not a multiple of 8 g, groups of 16000 or more elements, no more elements than groups).
int64_t qwz_group_count(int64_t numel);

// Per group of numel / groups consecutive elements: max = max |x|, scale = 256 / (2 max) (1 when
// max is 0), q = clamp(round-half-even(x * scale), -128, 127); inv_scales[g] = 1 / scale. The
// dequantized value q / scale is within 1 / (2 scale) of x, except where x rounds to 128, the
// clamp's one step (x near +max: within 1 / scale). numel must be a multiple of groups.
void quantize_int8_symmetric_reference(const uint16_t* in_fp16, int64_t numel, int64_t groups,
                                       int8_t* q, float* inv_scales);
// out = fp16(q * inv_scales[group]) (DeepSpeed's dequantize writes fp16).
void dequantize_int8_symmetric_reference(const int8_t* q, const float* inv_scales, int64_t numel,
                                         int64_t groups, uint16_t* out_fp16);

// The same, vectorized and split over the CPU kernels' threads.
void quantize_int8_symmetric_cpu(const uint16_t* in_fp16, int64_t numel, int64_t groups, int8_t* q,
                                 float* inv_scales);
void dequantize_int8_symmetric_cpu(const int8_t* q, const float* inv_scales, int64_t numel,
                                   int64_t groups, uint16_t* out_fp16);

}  // namespace zero::kernels
