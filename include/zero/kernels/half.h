// 16-bit floating-point formats of the kernels (fp16, bf16 as raw uint16_t bits) and their
// scalar conversions with round-to-nearest-even, the definition every vectorized cast matches.
#pragma once

#include <cstdint>

namespace zero::kernels {

enum class Half16 { kFp16, kBf16 };

const char* half16_name(Half16 type);

// Exact widening of fp16 / bf16 bits to fp32 (subnormals, inf and NaN included).
float half16_to_float(uint16_t bits, Half16 type);

// Narrowing with round-to-nearest-even. fp16: values >= 65520 in magnitude become inf,
// subnormals are produced exactly; NaN stays NaN (quiet). bf16: NaN becomes (sign | 0x7fc0 |
// top payload bits), i.e. quiet NaN, never inf.
uint16_t float_to_half16(float value, Half16 type);

}  // namespace zero::kernels
