// Helpers of the kernel tests: random data that is never zero, NaN poisoning, dtype-scaled
// comparisons with the first mismatch in the failure message, and the SIMD levels to cover.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <zero/kernels/cpu.h>
#include <zero/kernels/half.h>

namespace zero::kernels::test {

// Uniform magnitudes in [lo, hi) with random signs: no zeros, no denormals.
inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = 0.01f,
                                        float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(lo, hi);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& x : out) x = sign(rng) ? -mag(rng) : mag(rng);
  return out;
}

// random_floats() memoized: large inputs are generated once per test binary.
inline const std::vector<float>& cached_floats(int64_t n, uint32_t seed, float lo = 0.01f,
                                               float hi = 2.0f) {
  static std::map<std::tuple<int64_t, uint32_t, float, float>, std::vector<float>> cache;
  auto key = std::make_tuple(n, seed, lo, hi);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, random_floats(n, seed, lo, hi)).first;
  return it->second;
}

// Positive values (second moments).
inline std::vector<float> random_positive(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(lo, hi);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& x : out) x = mag(rng);
  return out;
}

inline std::vector<uint16_t> to_half16(const std::vector<float>& x, Half16 type) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = float_to_half16(x[i], type);
  return out;
}

inline std::vector<float> nan_floats(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n), std::nanf(""));
}
inline std::vector<uint16_t> nan_half16(int64_t n) {
  return std::vector<uint16_t>(static_cast<size_t>(n), 0x7fff);  // NaN in fp16 and bf16
}

// Empty string when every |a - b| <= rtol * max(|a|, |b|) + atol, else the first mismatch.
inline std::string compare(const float* a, const float* b, int64_t n, double rtol, double atol) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i], y = b[i];
    const double tol = rtol * std::max(std::fabs(x), std::fabs(y)) + atol;
    if (!(std::fabs(x - y) <= tol)) {
      std::ostringstream out;
      out.precision(9);
      out << "index " << i << " of " << n << ": " << x << " vs " << y << " (tol " << tol << ")";
      return out.str();
    }
  }
  return {};
}
// Tolerance for results of sums that may cancel (m = b1*m + (1-b1)*g): FMA and separate
// rounding differ by an ulp of the addends, not of the result, so the absolute part scales
// with the largest magnitude in the reference.
inline double scaled_atol(const std::vector<float>& ref, double rtol) {
  double max_abs = 0.0;
  for (float x : ref) max_abs = std::max(max_abs, static_cast<double>(std::fabs(x)));
  return rtol * max_abs;
}

inline std::string compare(const std::vector<float>& a, const std::vector<float>& b, double rtol,
                           double atol) {
  if (a.size() != b.size()) return "size mismatch";
  return compare(a.data(), b.data(), static_cast<int64_t>(a.size()), rtol, atol);
}

// Bitwise equality of 16-bit or 32-bit buffers (NaN payloads must match too).
template <class T>
inline std::string compare_bits(const std::vector<T>& a, const std::vector<T>& b) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "16- or 32-bit elements");
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>;
  if (a.size() != b.size()) return "size mismatch";
  for (size_t i = 0; i < a.size(); ++i) {
    Bits x, y;
    std::memcpy(&x, &a[i], sizeof x);
    std::memcpy(&y, &b[i], sizeof y);
    if (x != y) {
      std::ostringstream out;
      out << "index " << i << " of " << a.size() << ": 0x" << std::hex << x << " vs 0x" << y;
      return out.str();
    }
  }
  return {};
}

// Every SIMD level this CPU can run, lowest first.
inline std::vector<SimdLevel> simd_levels() {
  std::vector<SimdLevel> out{SimdLevel::kScalar};
  if (detected_simd_level() >= SimdLevel::kAvx2) out.push_back(SimdLevel::kAvx2);
  if (detected_simd_level() >= SimdLevel::kAvx512) out.push_back(SimdLevel::kAvx512);
  return out;
}

// Restores the SIMD level and thread count on scope exit.
class ScopedCpuSettings {
 public:
  ScopedCpuSettings(SimdLevel level, int threads) : level_(simd_level()), threads_(cpu_threads()) {
    set_simd_level(level);
    set_cpu_threads(threads);
  }
  ~ScopedCpuSettings() {
    set_simd_level(level_);
    set_cpu_threads(threads_);
  }

 private:
  SimdLevel level_;
  int threads_;
};

inline const int64_t kOddLengths[] = {1, 7, 15, 33, 1000003};

}  // namespace zero::kernels::test
