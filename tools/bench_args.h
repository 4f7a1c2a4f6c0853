// Argument helpers shared by the communication benchmarks (`zero bench comm` and
// benchmarks/comm/gloo_direct_bench): byte sizes with K/M/G suffixes and comma lists.
#pragma once

#include <zero/error.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace zero::tools {

// "4096", "64K", "16M", "1G" (binary units; a trailing "B" is allowed) -> bytes.
inline int64_t parse_bytes(const std::string& s) {
  ZERO_CHECK(!s.empty(), UsageError, "empty size");
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    throw UsageError("bad size '" + s + "' (e.g. 4096, 64K, 16M, 1G)");
  }
  const std::string unit = s.substr(pos);
  const double mult = unit.empty() || unit == "B" ? 1.0
                      : unit[0] == 'K'            ? 1024.0
                      : unit[0] == 'M'            ? 1048576.0
                      : unit[0] == 'G'            ? 1073741824.0
                                                  : -1.0;
  ZERO_CHECK(mult > 0 && v >= 0, UsageError, "bad size '", s, "' (e.g. 4096, 64K, 16M, 1G)");
  return static_cast<int64_t>(v * mult);
}

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace zero::tools
