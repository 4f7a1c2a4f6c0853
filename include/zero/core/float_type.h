// The element type of a flat group as the layout math sees it: a name and a size, no LibTorch
// (the layout is pure data). zero/core/float_type_torch.h converts at the tensor boundary.
#pragma once

#include <cstdint>

namespace zero {

// Trainable parameters are floating point: LibTorch gives no other dtype a gradient.
enum class FloatType : int8_t { kFloat32, kFloat16, kBFloat16, kFloat64 };

int64_t float_type_bytes(FloatType type);
const char* float_type_name(FloatType type);  // as LibTorch prints the dtype: Float, Half, ...

}  // namespace zero
