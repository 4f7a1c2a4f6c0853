// qwZ's block quantization references (zero/kernels/quantize.h): DeepSpeed's group choice (the
// expected counts below come from running its CUDAQuantizer.quantize loop, transcribed in
// Python), the symmetric int8 rounding (half to even, the clamp at +128), the error bound of
// every element against its group's scale, and the fp16 dequantization; the vectorized, threaded
// _cpu kernels against the references, bit for bit, at every SIMD level this CPU has.
#include <zero/error.h>
#include <zero/kernels/cpu.h>
#include <zero/kernels/half.h>
#include <zero/kernels/quantize.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

using namespace zero::kernels;

namespace {

std::vector<uint16_t> fp16(const std::vector<float>& values) {
  std::vector<uint16_t> out;
  for (float v : values) out.push_back(float_to_half16(v, Half16::kFp16));
  return out;
}

}  // namespace

TEST_CASE("qwZ group counts are DeepSpeed's CUDAQuantizer's") {
  const std::vector<std::pair<int64_t, int64_t>> expected = {
      {8, 1},         {1024, 1},        {16384, 4},   {589824, 96},
      {2359296, 384}, {38597376, 5199}, {128000, 16}, {16777216, 4096}};
  for (const auto& [numel, groups] : expected) {
    INFO(numel << " elements");
    CHECK(qwz_group_count(numel) == groups);
  }
  // What DeepSpeed asserts against: no multiple of 8 elements per group.
  for (int64_t numel : {7, 12, 100}) CHECK_THROWS_AS(qwz_group_count(numel), zero::UsageError);
}

TEST_CASE("symmetric int8: scale 256 / (2 max), rounding half to even, the clamp at +128") {
  // max 128: scale 1, so the values are their own quantized levels.
  const std::vector<uint16_t> in = fp16({128, -128, 2.5f, 3.5f, -2.5f, 0.4f, 127.6f, 1});
  std::vector<int8_t> q(in.size());
  float inv_scale = 0;
  quantize_int8_symmetric_reference(in.data(), static_cast<int64_t>(in.size()), 1, q.data(),
                                    &inv_scale);
  CHECK(inv_scale == 1.0f);
  CHECK(q == std::vector<int8_t>{127, -128, 2, 4, -2, 0, 127, 1});
  // A group of zeros: scale 1, all zero.
  const std::vector<uint16_t> zeros(8, 0);
  quantize_int8_symmetric_reference(zeros.data(), 8, 1, q.data(), &inv_scale);
  CHECK(inv_scale == 1.0f);
  CHECK(q == std::vector<int8_t>(8, 0));
}

TEST_CASE("every element within half a step of its group's scale; fp16 dequantization") {
  std::mt19937 gen(7);
  const int64_t groups = 16, size = 1000, numel = groups * size;
  std::vector<float> values(numel);
  for (int64_t g = 0; g < groups; ++g) {
    // Groups of very different magnitudes: each gets its own scale.
    std::normal_distribution<float> dist(0.0f, std::pow(10.0f, static_cast<float>(g % 6) - 3));
    for (int64_t i = 0; i < size; ++i) values[g * size + i] = dist(gen);
  }
  const std::vector<uint16_t> in = fp16(values);
  std::vector<int8_t> q(numel);
  std::vector<float> inv(groups);
  quantize_int8_symmetric_reference(in.data(), numel, groups, q.data(), inv.data());
  std::vector<uint16_t> out(numel);
  dequantize_int8_symmetric_reference(q.data(), inv.data(), numel, groups, out.data());
  for (int64_t g = 0; g < groups; ++g) {
    float max = 0;
    for (int64_t i = 0; i < size; ++i)
      max = std::max(max, std::fabs(half16_to_float(in[g * size + i], Half16::kFp16)));
    CHECK(inv[g] == 1 / (256.0f / (2 * max)));
    for (int64_t i = 0; i < size; ++i) {
      const int64_t k = g * size + i;
      const float x = half16_to_float(in[k], Half16::kFp16);
      const float deq = static_cast<float>(q[k]) * inv[g];
      // The clamp: only an x that rounds to +128 (stored as 127) may be a whole step off.
      const float bound = q[k] == 127 ? inv[g] : inv[g] / 2;
      INFO("group " << g << " element " << i << ": " << x << " -> " << deq);
      // Slack for the float products (scale, q * inv_scale): a few ulps of x.
      REQUIRE(std::fabs(deq - x) <= bound + 4e-7f * std::fabs(x));
      REQUIRE(out[k] == float_to_half16(deq, Half16::kFp16));
    }
  }
}

TEST_CASE("the _cpu kernels give the references' bits at every SIMD level") {
  std::mt19937 gen(11);
  std::vector<SimdLevel> levels = {SimdLevel::kScalar};
  if (detected_simd_level() >= SimdLevel::kAvx2) levels.push_back(SimdLevel::kAvx2);
  if (detected_simd_level() >= SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  const SimdLevel before = simd_level();
  // Small and large (threaded) buffers; groups of DeepSpeed's choice; ties at .5 steps (values
  // that are exact multiples of half a level), zeros, a group of zeros, the clamp.
  for (int64_t numel :
       {int64_t{8}, int64_t{1024}, int64_t{16384 + 8 * 13}, int64_t{589824}, int64_t{2359296}}) {
    const int64_t groups = qwz_group_count(numel);
    std::vector<float> values(static_cast<size_t>(numel));
    std::normal_distribution<float> dist(0.0f, 0.05f);
    for (auto& v : values) v = dist(gen);
    for (int64_t i = 0; i < numel; i += 97) values[static_cast<size_t>(i)] = 0.5f * (i % 17);
    const int64_t size = numel / groups;
    for (int64_t i = 0; i < size; ++i) values[static_cast<size_t>(i)] = 0;
    if (groups > 1) {  // scale 1: ties round to even, 127.6 clamps to 127
      const float ties[8] = {128, 2.5f, 3.5f, -2.5f, 127.6f, -0.5f, 0.5f, 1.5f};
      std::copy(ties, ties + 8, values.begin() + size);
    }
    const std::vector<uint16_t> in = fp16(values);
    std::vector<int8_t> q_ref(numel), q(numel);
    std::vector<float> inv_ref(groups), inv(groups);
    std::vector<uint16_t> out_ref(numel), out(numel);
    quantize_int8_symmetric_reference(in.data(), numel, groups, q_ref.data(), inv_ref.data());
    dequantize_int8_symmetric_reference(q_ref.data(), inv_ref.data(), numel, groups,
                                        out_ref.data());
    for (SimdLevel level : levels) {
      INFO(numel << " elements in " << groups << " groups, " << simd_level_name(level));
      set_simd_level(level);
      quantize_int8_symmetric_cpu(in.data(), numel, groups, q.data(), inv.data());
      dequantize_int8_symmetric_cpu(q_ref.data(), inv_ref.data(), numel, groups, out.data());
      CHECK(q == q_ref);
      CHECK(inv == inv_ref);
      CHECK(out == out_ref);
    }
  }
  set_simd_level(before);
}

TEST_CASE("qgZ int4: scale 7 / max, half to even, 15 levels, two values per byte") {
  // max 7: scale 1. 2.5 and 3.5 round to even; +-7 are the end levels.
  const std::vector<float> in = {7, -7, 2.5f, 3.5f, -2.5f, 0.4f, 6.6f};  // odd: a lone last value
  std::vector<int8_t> packed(static_cast<size_t>(int4_packed_bytes(7)), 0x55);
  float inv = 0;
  quantize_int4_symmetric_reference(in.data(), 7, 8, packed.data(), &inv);
  CHECK(inv == 1.0f);
  REQUIRE(packed.size() == 4);
  auto nib = [&](int i) {
    const int v = (static_cast<uint8_t>(packed[i / 2]) >> (i % 2 ? 4 : 0)) & 0xf;
    return v >= 8 ? v - 16 : v;
  };
  CHECK(std::vector<int>{nib(0), nib(1), nib(2), nib(3), nib(4), nib(5), nib(6)} ==
        std::vector<int>{7, -7, 2, 4, -2, 0, 7});
  CHECK((static_cast<uint8_t>(packed[3]) >> 4) == 0);  // the unused nibble is zero
  // Dequantize-add accumulates.
  std::vector<float> out(7, 1.0f);
  dequantize_add_int4_symmetric_reference(packed.data(), &inv, 7, 8, out.data());
  CHECK(out == std::vector<float>{8, -6, 3, 5, -1, 1, 8});
  // Unbiased: a block's largest positive and most negative values come back alike.
  const std::vector<float> pm = {0.3f, -0.3f, 0.1f};
  std::vector<int8_t> q2(2);
  quantize_int4_symmetric_reference(pm.data(), 3, 3, q2.data(), &inv);
  std::vector<float> back(3, 0.0f);
  dequantize_add_int4_symmetric_reference(q2.data(), &inv, 3, 3, back.data());
  CHECK(back[0] == -back[1]);
}

TEST_CASE("qgZ int4: each value within max / 14 of x, blocks of any size") {
  std::mt19937 gen(5);
  for (const int64_t numel : {int64_t{1}, int64_t{999}, int64_t{4096}, int64_t{10001}}) {
    for (const int64_t block : {int64_t{1}, int64_t{7}, int64_t{512}}) {
      std::vector<float> x(static_cast<size_t>(numel));
      std::normal_distribution<float> dist(0.0f, 1e-3f);
      for (auto& v : x) v = dist(gen);
      const int64_t blocks = int4_block_count(numel, block);
      std::vector<int8_t> packed(static_cast<size_t>(int4_packed_bytes(numel)));
      std::vector<float> inv(static_cast<size_t>(blocks));
      quantize_int4_symmetric_reference(x.data(), numel, block, packed.data(), inv.data());
      std::vector<float> back(static_cast<size_t>(numel), 0.0f);
      dequantize_add_int4_symmetric_reference(packed.data(), inv.data(), numel, block, back.data());
      for (int64_t b = 0; b < blocks; ++b) {
        float max = 0;
        for (int64_t i = b * block; i < std::min(numel, (b + 1) * block); ++i)
          max = std::max(max, std::fabs(x[static_cast<size_t>(i)]));
        for (int64_t i = b * block; i < std::min(numel, (b + 1) * block); ++i) {
          const float err = std::fabs(back[static_cast<size_t>(i)] - x[static_cast<size_t>(i)]);
          INFO(numel << " values, blocks of " << block << ", value " << i);
          REQUIRE(err <= max / 14 * (1 + 1e-5f));
        }
      }
    }
  }
}
