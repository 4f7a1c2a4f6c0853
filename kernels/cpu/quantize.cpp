// The qwZ block quantization references (quantize.h): a transcription of DeepSpeed's
// CUDAQuantizer group choice and its Symmetric Params<8> quantize / dequantize.
#include <zero/kernels/quantize.h>

#include <zero/error.h>
#include <zero/kernels/half.h>

#include <algorithm>
#include <cmath>

namespace zero::kernels {

int64_t qwz_group_count(int64_t numel) {
  constexpr int64_t kTarget = 8000;  // DeepSpeed: "the optimal size is 4k ... below 8k"
  ZERO_CHECK(numel > 0, UsageError, "qwZ: a tensor of ", numel, " elements");
  int64_t groups = (numel + kTarget - 1) / kTarget;
  while (groups < numel) {
    if (numel % (8 * groups) == 0) break;
    ++groups;
  }
  while (numel % (8 * groups * 2) == 0 && numel / groups > kTarget) groups *= 2;
  ZERO_CHECK(numel % (8 * groups) == 0, UsageError, "qwZ: quantized weights need a multiple of 8 ",
             "elements per group; ", numel, " cannot be divided by 8 x ", groups);
  ZERO_CHECK(numel / groups < 16000, UsageError, "qwZ: ", numel, " / ", groups,
             " elements per group is 16000 or more");
  ZERO_CHECK(numel > groups, UsageError, "qwZ: no group size for a tensor of ", numel, " elements");
  return groups;
}

void quantize_int8_symmetric_reference(const uint16_t* in_fp16, int64_t numel, int64_t groups,
                                       int8_t* q, float* inv_scales) {
  ZERO_CHECK(groups > 0 && numel % groups == 0, UsageError, "qwZ: ", numel, " elements in ", groups,
             " groups");
  const int64_t size = numel / groups;
  for (int64_t g = 0; g < groups; ++g) {
    const uint16_t* x = in_fp16 + g * size;
    float max = 0;
    for (int64_t i = 0; i < size; ++i)
      max = std::max(max, std::fabs(half16_to_float(x[i], Half16::kFp16)));
    const float scale = max == 0 ? 1.0f : 256.0f / (2 * max);
    for (int64_t i = 0; i < size; ++i) {
      const float v = half16_to_float(x[i], Half16::kFp16) * scale;
      const long r = std::lrint(v);  // round half to even, as __float2int_rn
      q[g * size + i] = static_cast<int8_t>(std::clamp<long>(r, -128, 127));
    }
    inv_scales[g] = 1 / scale;
  }
}

void dequantize_int8_symmetric_reference(const int8_t* q, const float* inv_scales, int64_t numel,
                                         int64_t groups, uint16_t* out_fp16) {
  ZERO_CHECK(groups > 0 && numel % groups == 0, UsageError, "qwZ: ", numel, " elements in ", groups,
             " groups");
  const int64_t size = numel / groups;
  for (int64_t i = 0; i < numel; ++i)
    out_fp16[i] = float_to_half16(static_cast<float>(q[i]) * inv_scales[i / size], Half16::kFp16);
}

int64_t int4_packed_bytes(int64_t numel) {
  return (numel + 1) / 2;
}

int64_t int4_block_count(int64_t numel, int64_t block) {
  ZERO_CHECK(block > 0, UsageError, "qgZ: blocks of ", block, " values");
  return (numel + block - 1) / block;
}

void quantize_int4_symmetric_reference(const float* in, int64_t numel, int64_t block,
                                       int8_t* packed, float* inv_scales) {
  const int64_t blocks = int4_block_count(numel, block);
  std::fill(packed, packed + int4_packed_bytes(numel), int8_t{0});
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block, end = std::min(numel, begin + block);
    float max = 0;
    for (int64_t i = begin; i < end; ++i) max = std::max(max, std::fabs(in[i]));
    const float scale = max == 0 ? 1.0f : 7.0f / max;
    for (int64_t i = begin; i < end; ++i) {
      const long r = std::clamp<long>(std::lrint(in[i] * scale), -7, 7);
      const auto nibble = static_cast<uint8_t>(r & 0xf);
      auto& byte = reinterpret_cast<uint8_t&>(packed[i / 2]);
      byte = static_cast<uint8_t>(byte | (i % 2 == 0 ? nibble : nibble << 4));
    }
    inv_scales[b] = 1 / scale;
  }
}

void dequantize_add_int4_symmetric_reference(const int8_t* packed, const float* inv_scales,
                                             int64_t numel, int64_t block, float* out) {
  int4_block_count(numel, block);  // checks the block
  for (int64_t i = 0; i < numel; ++i) {
    const auto byte = static_cast<uint8_t>(packed[i / 2]);
    const int nibble = i % 2 == 0 ? byte & 0xf : byte >> 4;
    const int q = nibble >= 8 ? nibble - 16 : nibble;  // sign-extend the 4 bits
    out[i] += static_cast<float>(q) * inv_scales[i / block];
  }
}

}  // namespace zero::kernels
