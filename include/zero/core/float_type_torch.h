// FloatType <-> LibTorch's ScalarType, where layout groups meet tensors.
#pragma once

#include <zero/core/float_type.h>
#include <zero/error.h>

#include <c10/core/ScalarType.h>

#include <string>

namespace zero {

inline c10::ScalarType to_scalar_type(FloatType type) {
  switch (type) {
    case FloatType::kFloat32:
      return c10::ScalarType::Float;
    case FloatType::kFloat16:
      return c10::ScalarType::Half;
    case FloatType::kBFloat16:
      return c10::ScalarType::BFloat16;
    case FloatType::kFloat64:
      return c10::ScalarType::Double;
  }
  throw InternalError("to_scalar_type: unknown FloatType " +
                      std::to_string(static_cast<int>(type)));
}

// `what` names the tensor in the error (a parameter's name).
inline FloatType float_type_of(c10::ScalarType type, const std::string& what) {
  switch (type) {
    case c10::ScalarType::Float:
      return FloatType::kFloat32;
    case c10::ScalarType::Half:
      return FloatType::kFloat16;
    case c10::ScalarType::BFloat16:
      return FloatType::kBFloat16;
    case c10::ScalarType::Double:
      return FloatType::kFloat64;
    default:
      break;
  }
  throw UsageError("'" + what + "' is " + c10::toString(type) +
                   ": only Float, Half, BFloat16 and Double parameters can be partitioned");
}

}  // namespace zero
