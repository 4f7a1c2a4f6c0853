// Helpers shared by the benchmarks (`zero bench comm|adam`, benchmarks/comm/gloo_direct_bench,
// benchmarks/kernels/cuda_adam_bench): byte sizes with K/M/G suffixes, comma lists, test sizes.
#pragma once

#include <zero/error.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace zero::tools {

// `count` log-uniform sizes (1x to 1000x apart) scaled to sum exactly to `total`: the tensor
// sizes of the "mixed" cases of `zero bench adam` and the CUDA Adam benchmark.
inline std::vector<int64_t> mixed_sizes(int64_t total, int count) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<double> log_size(0.0, std::log(1000.0));
  std::vector<double> w(static_cast<size_t>(count));
  double sum = 0.0;
  for (double& x : w) sum += (x = std::exp(log_size(rng)));
  std::vector<int64_t> sizes;
  int64_t used = 0;
  for (int i = 0; i < count; ++i) {
    int64_t n = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(total) * w[i] / sum));
    if (i == count - 1) n = std::max<int64_t>(1, total - used);
    sizes.push_back(n);
    used += n;
  }
  return sizes;
}

// 134217728 -> "128M"; other counts as they are.
inline std::string size_label(int64_t n) {
  if (n % (int64_t{1} << 20) == 0) return std::to_string(n >> 20) + "M";
  return std::to_string(n);
}

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
