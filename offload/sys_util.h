// Small POSIX helpers private to offload/: strerror text with the errno number, and the
// reading of small text files (/proc entries, owner files).
#pragma once

#include <string>

#include <zero/text.h>

namespace zero::offload::detail {

using ::zero::detail::errno_text;

// The whole content of a small file; false (and *out untouched) when it cannot be read.
bool read_small_file(const std::string& path, std::string* out);

}  // namespace zero::offload::detail
