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

// ZeRO++ qgZ (zero_quantized_gradients): symmetric int4 blocks of `block` values read as fp32 (the
// last block may be shorter), two values per byte (value 2i in the low nibble, a lone last value
// beside a zero nibble). Per block: max = max |x|, scale = 7 / max (1 when max is 0), q =
// round-half-even(x * scale) in [-7, 7], inv_scales[b] = 1 / scale, so each value is within
// 1 / (2 scale) = max / 14 of x. Not DeepSpeed's int4 Symmetric (scale 16 / (2 max), clamp to
// [-8, 7]): that maps a block's largest positive value to 8 and clamps it to 7, shrinking it by
// 1/8 while the most negative keeps its value: a bias. Training the example GPT for 50 steps with
// it (4 ranks on 2 emulated hosts) put the mean loss of the last 10 steps up to 8% above stage
// 3's, against 0.5% (qgZ) and 2% (with qwZ and hpZ) with these 15 levels. And fp32 where
// DeepSpeed's kernel reads fp16, which would flush small gradients to zero.
int64_t int4_packed_bytes(int64_t numel);
int64_t int4_block_count(int64_t numel, int64_t block);
void quantize_int4_symmetric_reference(const float* in, int64_t numel, int64_t block,
                                       int8_t* packed, float* inv_scales);
// out[i] += q[i] * inv_scales[block of i] (the sums of qgZ's reductions).
void dequantize_add_int4_symmetric_reference(const int8_t* packed, const float* inv_scales,
                                             int64_t numel, int64_t block, float* out);

// The same, vectorized and split over the CPU kernels' threads.
void quantize_int8_symmetric_cpu(const uint16_t* in_fp16, int64_t numel, int64_t groups, int8_t* q,
                                 float* inv_scales);
void dequantize_int8_symmetric_cpu(const int8_t* q, const float* inv_scales, int64_t numel,
                                   int64_t groups, uint16_t* out_fp16);

}  // namespace zero::kernels
