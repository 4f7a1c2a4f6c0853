// Small text helpers every folder uses the same way (no LibTorch): the text of an errno, a
// shape as "[2, 3]", whitespace trimmed from both ends.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace zero::detail {

// "No space left on device (errno 28)".
inline std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message (maybe not in buf).
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return std::string(msg) + " (errno " + std::to_string(err) + ")";
}

// "[2, 3]" (DeepSpeed and safetensors print shapes this way); "[]" for a scalar.
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// `s` without leading and trailing spaces, tabs, CRs and LFs.
inline std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace zero::detail
