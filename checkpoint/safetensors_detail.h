// Internals shared by the safetensors header parser, reader and writer: the checked size of a
// tensor and the text of a shape in error messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zero/checkpoint/safetensors.h>
#include <zero/text.h>

namespace zero::ckpt::detail {

// numel * dtype_bytes, or nullopt when a dimension is negative or a product overflows int64.
std::optional<int64_t> checked_nbytes(const std::vector<int64_t>& shape, DType dtype);

using ::zero::detail::shape_text;

}  // namespace zero::ckpt::detail
