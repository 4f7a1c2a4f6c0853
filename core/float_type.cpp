#include <zero/core/float_type.h>
#include <zero/error.h>

#include <string>

namespace zero {

int64_t float_type_bytes(FloatType type) {
  switch (type) {
    case FloatType::kFloat32:
      return 4;
    case FloatType::kFloat16:
      return 2;
    case FloatType::kBFloat16:
      return 2;
    case FloatType::kFloat64:
      return 8;
  }
  throw InternalError("float_type_bytes: unknown FloatType " +
                      std::to_string(static_cast<int>(type)));
}

const char* float_type_name(FloatType type) {
  switch (type) {
    case FloatType::kFloat32:
      return "Float";
    case FloatType::kFloat16:
      return "Half";
    case FloatType::kBFloat16:
      return "BFloat16";
    case FloatType::kFloat64:
      return "Double";
  }
  throw InternalError("float_type_name: unknown FloatType " +
                      std::to_string(static_cast<int>(type)));
}

}  // namespace zero
