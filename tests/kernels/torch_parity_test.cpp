// Our Adam/AdamW against LibTorch's torch::optim::Adam / AdamW over several steps on random
// data (the engine's golden test relies on this), and our half conversions against c10's.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <random>

#include <zero/kernels/adam.h>
#include <zero/kernels/math.h>

#include "kernel_test_util.h"

using namespace zero::kernels;
using namespace zero::kernels::test;

namespace {

std::vector<float> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// Runs `steps` steps of LibTorch's optimizer and of adam_step_cpu (grad_scale 4 with gradients
// pre-multiplied by 4: exact) and checks the parameters after every step.
void check_against_torch(bool adamw, float weight_decay, int steps) {
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.99f, eps = 1e-8f;
  const std::vector<int64_t> sizes = {1, 7, 33, 1000, 4099};
  torch::manual_seed(1234);
  std::vector<torch::Tensor> params;
  std::vector<std::vector<float>> p, m, v;
  for (int64_t n : sizes) {
    params.push_back(torch::randn({n}).requires_grad_(true));
    p.push_back(to_vector(params.back().detach()));
    m.emplace_back(static_cast<size_t>(n), 0.0f);
    v.emplace_back(static_cast<size_t>(n), 0.0f);
  }
  std::unique_ptr<torch::optim::Optimizer> opt;
  const auto betas = std::make_tuple(static_cast<double>(beta1), static_cast<double>(beta2));
  if (adamw) {
    opt = std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(lr).betas(betas).eps(eps).weight_decay(weight_decay));
  } else {
    opt = std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(lr).betas(betas).eps(eps).weight_decay(weight_decay));
  }
  for (int step = 1; step <= steps; ++step) {
    AdamParams prm{lr, beta1, beta2, eps, weight_decay, adamw};
    prm.step = step;
    prm.grad_scale = 4.0f;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const at::Tensor g = torch::randn({sizes[i]}) * 0.1;
      params[i].mutable_grad() = g.clone();
      std::vector<float> g_scaled = to_vector(g);
      for (float& x : g_scaled) x *= 4.0f;
      adam_step_cpu(prm, p[i].data(), g_scaled.data(), m[i].data(), v[i].data(), sizes[i]);
    }
    opt->step();
    for (size_t i = 0; i < sizes.size(); ++i) {
      INFO((adamw ? "AdamW" : "Adam")
           << " wd=" << weight_decay << " step " << step << " size " << sizes[i]);
      CHECK(compare(p[i], to_vector(params[i].detach()), 1e-6, 1e-8) == "");
    }
  }
}

}  // namespace

TEST_CASE("adam_step_cpu matches torch::optim::AdamW and Adam", "[kernels][adam][torch]") {
  at::set_num_threads(1);
  check_against_torch(true, 0.01f, 6);
  check_against_torch(true, 0.0f, 3);
  check_against_torch(false, 0.0f, 6);
  check_against_torch(false, 0.05f, 6);
}

TEST_CASE("half conversions equal c10::Half and c10::BFloat16", "[kernels][math][torch]") {
  // Widening: every bit pattern (NaNs: both NaN).
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint16_t b = static_cast<uint16_t>(bits);
    c10::Half h;
    h.x = b;
    const float want_h = static_cast<float>(h);
    const float got_h = half16_to_float(b, Half16::kFp16);
    if (std::isnan(want_h)) {
      REQUIRE(std::isnan(got_h));
    } else {
      REQUIRE(std::memcmp(&want_h, &got_h, 4) == 0);
    }
    c10::BFloat16 bf;
    bf.x = b;
    const float want_b = static_cast<float>(bf);
    const float got_b = half16_to_float(b, Half16::kBf16);
    if (std::isnan(want_b)) {
      REQUIRE(std::isnan(got_b));
    } else {
      REQUIRE(std::memcmp(&want_b, &got_b, 4) == 0);
    }
  }
  // Narrowing: random bit patterns over every exponent, plus every fp16 value and midpoint.
  std::mt19937 rng(99);
  std::vector<float> xs;
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isnan(f)) xs.push_back(f);
  }
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {
    const float a = half16_to_float(static_cast<uint16_t>(bits), Half16::kFp16);
    const float b = half16_to_float(static_cast<uint16_t>(bits + 1), Half16::kFp16);
    xs.push_back(a);
    xs.push_back(0.5f * (a + b));
    xs.push_back(-0.5f * (a + b));
  }
  for (float f : xs) {
    INFO("value " << f);
    REQUIRE(float_to_half16(f, Half16::kFp16) == c10::Half(f).x);
    REQUIRE(float_to_half16(f, Half16::kBf16) == c10::BFloat16(f).x);
  }
  std::vector<uint16_t> h(xs.size()), h_ref(xs.size());
  for (Half16 t : {Half16::kFp16, Half16::kBf16}) {
    cast_to_half16_cpu(xs.data(), h.data(), t, static_cast<int64_t>(xs.size()));
    cast_to_half16_reference(xs.data(), h_ref.data(), t, static_cast<int64_t>(xs.size()));
    CHECK(compare_bits(h, h_ref) == "");
  }
}
