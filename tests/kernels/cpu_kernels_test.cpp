// Every vectorized CPU kernel (each SIMD level this CPU runs, 1 and 2 threads) against the
// scalar reference on random non-zero data, NaN-poisoned outputs and odd lengths.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include <zero/error.h>
#include <zero/kernels/adam.h>
#include <zero/kernels/cpu.h>
#include <zero/kernels/math.h>

#include "kernel_test_util.h"

using namespace zero::kernels;
using namespace zero::kernels::test;

namespace {

constexpr double kRtolF32 = 2e-6;   // a few fp32 ulps: FMA vs separate multiply-add
constexpr double kAtolF32 = 1e-12;  // m gets scaled_atol(): its sums may cancel

struct AdamCase {
  bool adamw;
  bool bias_correction;
  float grad_scale;
  float weight_decay;
};

std::string describe(SimdLevel level, int threads, int64_t n, const AdamCase& c) {
  return zero::detail::str(simd_level_name(level), " threads=", threads, " n=", n,
                           " adamw=", c.adamw, " bias_correction=", c.bias_correction,
                           " grad_scale=", c.grad_scale, " wd=", c.weight_decay);
}

AdamParams params_for(const AdamCase& c, int64_t step) {
  AdamParams p{};
  p.lr = 1e-3f;
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  p.eps = 1e-8f;
  p.weight_decay = c.weight_decay;
  p.adamw_mode = c.adamw;
  p.bias_correction = c.bias_correction;
  p.step = step;
  p.grad_scale = c.grad_scale;
  return p;
}

std::vector<AdamCase> all_cases() {
  std::vector<AdamCase> out;
  for (bool adamw : {false, true})
    for (bool bc : {false, true})
      for (float scale : {1.0f, 1024.0f})
        for (float wd : {0.0f, 0.01f}) out.push_back({adamw, bc, scale, wd});
  return out;
}

// Grad kinds: 0 fp32, 1 fp16, 2 bf16. Out kinds: -1 none, else Half16.
void check_adam(SimdLevel level, int threads, int64_t n, const AdamCase& c, int grad_kind,
                int out_kind, int steps) {
  INFO(describe(level, threads, n, c) << " grad_kind=" << grad_kind << " out_kind=" << out_kind);
  ScopedCpuSettings settings(level, threads);
  std::vector<float> p = cached_floats(n, 1), m = cached_floats(n, 2, 0.001f, 0.1f);
  std::vector<float> v = random_positive(n, 3, 1e-6f, 1e-2f);
  std::vector<float> p_ref = p, m_ref = m, v_ref = v;
  const Half16 out_type = out_kind == 1 ? Half16::kBf16 : Half16::kFp16;
  for (int step = 1; step <= steps; ++step) {
    const AdamParams prm = params_for(c, step);
    std::vector<float> g = cached_floats(n, 10 + step, 0.001f, 1.0f);
    for (float& x : g) x *= c.grad_scale;
    std::vector<uint16_t> out16 = nan_half16(n), out16_ref = nan_half16(n);
    uint16_t* out_ptr = out_kind >= 0 ? out16.data() : nullptr;
    uint16_t* out_ref_ptr = out_kind >= 0 ? out16_ref.data() : nullptr;
    if (grad_kind == 0 && out_kind < 0) {
      adam_step_cpu(prm, p.data(), g.data(), m.data(), v.data(), n);
      adam_step_reference(prm, p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n);
    } else if (grad_kind == 0) {
      adam_step_cpu_fp32_grad(prm, p.data(), g.data(), m.data(), v.data(), out_ptr, out_type, n);
      adam_step_reference_fp32_grad(prm, p_ref.data(), g.data(), m_ref.data(), v_ref.data(),
                                    out_ref_ptr, out_type, n);
    } else {
      const Half16 gt = grad_kind == 1 ? Half16::kFp16 : Half16::kBf16;
      // fp16 cannot hold 2.0 * 1024 * ... exactly scaled values beyond 65504: keep scale small.
      const std::vector<uint16_t> g16 = to_half16(g, gt);
      adam_step_cpu_mixed(prm, p.data(), g16.data(), gt, m.data(), v.data(), out_ptr, out_type, n);
      adam_step_reference_mixed(prm, p_ref.data(), g16.data(), gt, m_ref.data(), v_ref.data(),
                                out_ref_ptr, out_type, n);
    }
    INFO("step " << step);
    CHECK(compare(p, p_ref, kRtolF32, kAtolF32) == "");
    CHECK(compare(m, m_ref, kRtolF32, scaled_atol(m_ref, 1e-6)) == "");
    CHECK(compare(v, v_ref, kRtolF32, kAtolF32) == "");
    if (out_kind >= 0) {
      // The fused copy is exactly the rounding of the kernel's own fp32 result, and within
      // one 16-bit ulp of the reference's copy.
      CHECK(compare_bits(out16, to_half16(p, out_type)) == "");
      std::vector<float> a(n), b(n);
      cast_from_half16_reference(out16.data(), out_type, a.data(), n);
      cast_from_half16_reference(out16_ref.data(), out_type, b.data(), n);
      CHECK(compare(a, b, out_type == Half16::kFp16 ? 1.0 / 1024 : 1.0 / 128, 0.0) == "");
    }
  }
}

}  // namespace

TEST_CASE("adam_step_cpu matches the reference: every level, flag and length", "[kernels][adam]") {
  // Large lengths run on 2 threads only: one thread runs the same loop as the small lengths.
  for (SimdLevel level : simd_levels())
    for (int threads : {1, 2})
      for (int64_t n : kOddLengths) {
        if (n > 100 && threads == 1) continue;
        for (const AdamCase& c : all_cases())
          check_adam(level, threads, n, c, 0, -1, n > 100 ? 1 : 3);
      }
}

TEST_CASE("mixed-precision Adam variants match the reference", "[kernels][adam]") {
  for (SimdLevel level : simd_levels())
    for (int64_t n : kOddLengths)
      for (int grad_kind : {0, 1, 2})
        for (int out_kind : {-1, 0, 1}) {
          if (grad_kind == 0 && out_kind == -1) continue;  // the plain fp32 case above
          const AdamCase c{grad_kind != 2, true, grad_kind == 1 ? 8.0f : 1.0f, 0.01f};
          check_adam(level, n > 100 ? 2 : 1, n, c, grad_kind, out_kind, n > 100 ? 1 : 2);
        }
}

TEST_CASE("an element's Adam update does not depend on where it sits", "[kernels][adam]") {
  // The same 37 elements alone and at offset 5 of a longer array: in a vector body, a tail, or
  // across a thread's range boundary, every level gives the same bits (ZeRO shards, pipeline
  // stages and tied copies place one parameter at different offsets).
  const int64_t n = 37, offset = 5, total = 203;
  for (SimdLevel level : simd_levels())
    for (int threads : {1, 2})
      for (int out_kind : {-1, 1}) {
        INFO(simd_level_name(level) << " threads=" << threads << " out_kind=" << out_kind);
        ScopedCpuSettings settings(level, threads);
        const AdamParams prm = params_for({true, true, 1.0f, 0.01f}, 3);
        std::vector<float> p = cached_floats(total, 1), m = cached_floats(total, 2, 0.001f, 0.1f);
        std::vector<float> v = random_positive(total, 3, 1e-6f, 1e-2f);
        const std::vector<float> g = cached_floats(total, 4, 0.001f, 1.0f);
        std::vector<float> p1(p.begin() + offset, p.begin() + offset + n),
            m1(m.begin() + offset, m.begin() + offset + n),
            v1(v.begin() + offset, v.begin() + offset + n);
        const std::vector<float> g1(g.begin() + offset, g.begin() + offset + n);
        std::vector<uint16_t> out = nan_half16(total), out1 = nan_half16(n);
        adam_step_cpu_fp32_grad(prm, p.data(), g.data(), m.data(), v.data(),
                                out_kind >= 0 ? out.data() : nullptr, Half16::kBf16, total);
        adam_step_cpu_fp32_grad(prm, p1.data(), g1.data(), m1.data(), v1.data(),
                                out_kind >= 0 ? out1.data() : nullptr, Half16::kBf16, n);
        CHECK(compare_bits(std::vector<float>(p.begin() + offset, p.begin() + offset + n), p1) ==
              "");
        CHECK(compare_bits(std::vector<float>(m.begin() + offset, m.begin() + offset + n), m1) ==
              "");
        CHECK(compare_bits(std::vector<float>(v.begin() + offset, v.begin() + offset + n), v1) ==
              "");
        if (out_kind >= 0)
          CHECK(compare_bits(std::vector<uint16_t>(out.begin() + offset, out.begin() + offset + n),
                             out1) == "");
      }
}

TEST_CASE("Adam rejects bad hyper-parameters", "[kernels][adam]") {
  std::vector<float> p(4, 1.0f), g(4, 1.0f), m(4, 0.5f), v(4, 0.5f);
  AdamParams prm = params_for({true, true, 1.0f, 0.0f}, 0);  // step 0 with bias correction
  CHECK_THROWS_AS(adam_step_cpu(prm, p.data(), g.data(), m.data(), v.data(), 4), zero::UsageError);
  prm.step = 1;
  prm.grad_scale = 0.0f;
  CHECK_THROWS_AS(adam_step_reference(prm, p.data(), g.data(), m.data(), v.data(), 4),
                  zero::UsageError);
  prm.grad_scale = 1.0f;
  prm.beta2 = 1.0f;
  CHECK_THROWS_AS(adam_step_cpu(prm, p.data(), g.data(), m.data(), v.data(), 4), zero::UsageError);
  CHECK_THROWS_AS(set_simd_level(static_cast<SimdLevel>(99)), zero::UsageError);
  CHECK_THROWS_AS(set_cpu_threads(0), zero::UsageError);
}

TEST_CASE("unscale, scale, sum of squares and casts match the reference", "[kernels][math]") {
  for (SimdLevel level : simd_levels())
    for (int threads : {1, 2})
      for (int64_t n : kOddLengths) {
        INFO(simd_level_name(level) << " threads=" << threads << " n=" << n);
        ScopedCpuSettings settings(level, threads);
        const std::vector<float>& x = cached_floats(n, 7, 0.01f, 100.0f);
        std::vector<float> a = x, b = x;
        CHECK_FALSE(unscale_cpu(a.data(), n, 512.0f));
        CHECK_FALSE(unscale_reference(b.data(), n, 512.0f));
        CHECK(compare(a, b, 0.0, 0.0) == "");  // one multiply: bit-identical
        a = x, b = x;
        scale_cpu(a.data(), n, 0.37f);
        scale_reference(b.data(), n, 0.37f);
        CHECK(compare(a, b, 0.0, 0.0) == "");
        const double ss = sum_squares_cpu(x.data(), n), ss_ref = sum_squares_reference(x.data(), n);
        CHECK(std::fabs(ss - ss_ref) <= 1e-12 * ss_ref);
        for (Half16 t : {Half16::kFp16, Half16::kBf16}) {
          INFO(half16_name(t));
          std::vector<uint16_t> h = nan_half16(n), h_ref = nan_half16(n);
          cast_to_half16_cpu(x.data(), h.data(), t, n);
          cast_to_half16_reference(x.data(), h_ref.data(), t, n);
          CHECK(compare_bits(h, h_ref) == "");
          std::vector<float> f = nan_floats(n), f_ref = nan_floats(n);
          cast_from_half16_cpu(h.data(), t, f.data(), n);
          cast_from_half16_reference(h.data(), t, f_ref.data(), n);
          CHECK(compare(f, f_ref, 0.0, 0.0) == "");
          f = nan_floats(n), f_ref = nan_floats(n);
          CHECK_FALSE(unscale_to_fp32_cpu(h.data(), t, f.data(), n, 64.0f));
          CHECK_FALSE(unscale_to_fp32_reference(h.data(), t, f_ref.data(), n, 64.0f));
          CHECK(compare(f, f_ref, 0.0, 0.0) == "");
          const double s16 = sum_squares_cpu(h.data(), t, n);
          const double s16_ref = sum_squares_reference(h.data(), t, n);
          CHECK(std::fabs(s16 - s16_ref) <= 1e-12 * s16_ref);
          CHECK_FALSE(has_non_finite_cpu(h.data(), t, n));
        }
        CHECK_FALSE(has_non_finite_cpu(x.data(), n));
      }
}

TEST_CASE("casts round to nearest even at the edges of fp16 and bf16", "[kernels][math]") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {
      0.0f,           -0.0f,          65504.0f,           65519.99f,          65520.0f,
      -65520.0f,      1e-8f,          2.98e-8f,           2.9802322e-8f,      5.96e-8f,
      6.1035156e-05f, 6.0975552e-05f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, inf,
      -inf,           3.3895314e38f,  1.00390625f,        1.01171875f};
  const std::vector<float> wide = random_floats(4099, 11, 1e-9f, 7e4f);
  x.insert(x.end(), wide.begin(), wide.end());
  const int64_t n = static_cast<int64_t>(x.size());
  for (SimdLevel level : simd_levels())
    for (Half16 t : {Half16::kFp16, Half16::kBf16}) {
      INFO(simd_level_name(level) << " " << half16_name(t));
      ScopedCpuSettings settings(level, 1);
      std::vector<uint16_t> h = nan_half16(n), h_ref = nan_half16(n);
      cast_to_half16_cpu(x.data(), h.data(), t, n);
      cast_to_half16_reference(x.data(), h_ref.data(), t, n);
      CHECK(compare_bits(h, h_ref) == "");
      // Every 16-bit pattern widens identically (NaNs compared as bits below).
      std::vector<uint16_t> all(65536);
      for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
      std::vector<float> f(65536), f_ref(65536);
      cast_from_half16_cpu(all.data(), t, f.data(), 65536);
      cast_from_half16_reference(all.data(), t, f_ref.data(), 65536);
      CHECK(std::memcmp(f.data(), f_ref.data(), f.size() * sizeof(float)) == 0);
    }
  CHECK(float_to_half16(65520.0f, Half16::kFp16) == 0x7c00);
  CHECK(float_to_half16(65519.99f, Half16::kFp16) == 0x7bff);
  CHECK(float_to_half16(1.0f + 1.0f / 2048, Half16::kFp16) == 0x3c00);  // tie to even
  CHECK(float_to_half16(1.0f + 3.0f / 2048, Half16::kFp16) == 0x3c02);  // tie to even
  CHECK(float_to_half16(1.00390625f, Half16::kBf16) == 0x3f80);         // tie to even
  CHECK(float_to_half16(1.01171875f, Half16::kBf16) == 0x3f82);         // tie to even
}

TEST_CASE("the non-finite check finds one inf or NaN at every position class", "[kernels][math]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (SimdLevel level : simd_levels())
    for (int threads : {1, 2})
      for (int64_t n : kOddLengths) {
        if (n > 100 && threads == 1) continue;
        ScopedCpuSettings settings(level, threads);
        const std::vector<float>& base = cached_floats(n, 5);
        std::vector<uint16_t> base16[2] = {to_half16(cached_floats(n, 6), Half16::kFp16),
                                           to_half16(cached_floats(n, 6), Half16::kBf16)};
        // head, second element, middle (vector body), tail, last; 19: inside the 2nd vector.
        std::vector<int64_t> positions = {0, 1, n / 2, n - 2, n - 1};
        if (n > 64) positions.push_back(16 + 3);
        for (int64_t pos : positions) {
          if (pos < 0 || pos >= n) continue;
          for (float bad : {inf, -inf, std::nanf("")}) {
            INFO(simd_level_name(level)
                 << " threads=" << threads << " n=" << n << " pos=" << pos << " value=" << bad);
            std::vector<float> x = base;
            x[pos] = bad;
            CHECK(has_non_finite_cpu(x.data(), n));
            CHECK(has_non_finite_reference(x.data(), n));
            std::vector<float> y = x;
            CHECK(unscale_cpu(y.data(), n, 4.0f));
            CHECK(unscale_reference(x.data(), n, 4.0f));
            for (Half16 t : {Half16::kFp16, Half16::kBf16}) {
              std::vector<uint16_t> h = base16[t == Half16::kFp16 ? 0 : 1];
              h[pos] = float_to_half16(bad, t);
              std::vector<float> out = nan_floats(n);
              CHECK(has_non_finite_cpu(h.data(), t, n));
              CHECK(has_non_finite_reference(h.data(), t, n));
              CHECK(unscale_to_fp32_cpu(h.data(), t, out.data(), n, 2.0f));
            }
          }
        }
        // Finite values that overflow when unscaled by a scale < 1 are found too.
        std::vector<float> big = base;
        big[n - 1] = 3e38f;
        CHECK(unscale_cpu(big.data(), n, 0.5f));
      }
}

TEST_CASE("the access floor kernel has Adam's traffic and trivial math", "[kernels][adam]") {
  for (SimdLevel level : simd_levels()) {
    ScopedCpuSettings settings(level, 2);
    const int64_t n = 1000003;
    std::vector<float> p = random_floats(n, 1), g = random_floats(n, 2), m = random_floats(n, 3),
                       v = random_floats(n, 4);
    const std::vector<float> p0 = p, m0 = m, v0 = v;
    adam_access_floor_cpu(p.data(), g.data(), m.data(), v.data(), n);
    for (int64_t i = 0; i < n; i += 9973) {
      CHECK(p[i] == p0[i] + g[i]);
      CHECK(m[i] == m0[i] + g[i]);
      CHECK(v[i] == v0[i] + g[i]);
    }
    CHECK(p[n - 1] == p0[n - 1] + g[n - 1]);
  }
}
