// The fused Adam's launch lists (core/adam_launch.h), which the CUDA launcher and the CPU Adam
// both take: every field of every entry is the tensor it stands for, the lists split by dtype,
// and what the kernels cannot take comes back. Then the CPU twin over those lists against the
// single-buffer kernels, and ShardOptimizer's bf16 step through them writing param16.
#include <ATen/ATen.h>

#include <zero/core/optimizer.h>
#include <zero/kernels/adam.h>
#include <zero/kernels/multi_tensor.h>

#include "adam_launch.h"
#include "catch_after_torch.h"

#include <map>

using zero::OptimizerShard;
using zero::detail::AdamLaunch;
using zero::kernels::DType;

namespace {

OptimizerShard shard(int group, int64_t n, at::ScalarType grad_type, at::ScalarType p16_type,
                     bool with16) {
  OptimizerShard s;
  s.group = group;
  s.master = at::randn({n});
  s.grad = at::randn({n}).to(grad_type);
  if (with16) s.param16 = s.master.to(p16_type);
  return s;
}

struct States {
  std::vector<at::Tensor> m, v;
  explicit States(const std::vector<OptimizerShard>& shards) {
    for (const auto& s : shards) {
      m.push_back(at::rand_like(s.master));
      v.push_back(at::rand_like(s.master));
    }
  }
};

}  // namespace

TEST_CASE("every entry of a launch list points at its shard's tensors", "[core][adam_launch]") {
  at::manual_seed(1);
  std::vector<OptimizerShard> shards;
  shards.push_back(shard(0, 1000, at::kBFloat16, at::kBFloat16, true));
  shards.push_back(shard(1, 17, at::kFloat, at::kBFloat16, true));
  shards.push_back(shard(2, 33, at::kBFloat16, at::kBFloat16, false));
  shards.push_back(shard(3, 64, at::kHalf, at::kHalf, true));
  shards.push_back(shard(4, 5, at::kFloat, at::kFloat, false));
  // Not for the kernels: a strided gradient, a float64 master.
  OptimizerShard strided = shard(5, 8, at::kFloat, at::kFloat, false);
  strided.grad = at::randn({16}).slice(0, 0, 16, 2);
  shards.push_back(strided);
  OptimizerShard f64 = shard(6, 8, at::kFloat, at::kFloat, false);
  f64.master = f64.master.to(at::kDouble);
  shards.push_back(f64);
  States st(shards);
  std::vector<size_t> which{0, 1, 2, 3, 4, 5, 6};

  std::vector<AdamLaunch> launches;
  const std::vector<size_t> rest =
      zero::detail::for_each_adam_launch(shards, which, st.m, st.v, at::Device(at::kCPU),
                                         [&](const AdamLaunch& l) { launches.push_back(l); });
  CHECK((rest == std::vector<size_t>{5, 6}));

  std::map<size_t, int> seen;
  for (const AdamLaunch& l : launches) {
    REQUIRE(l.list.size() == l.taken.size());
    for (size_t k = 0; k < l.list.size(); ++k) {
      const size_t i = l.taken[k];
      const OptimizerShard& s = shards[i];
      const zero::kernels::AdamShard& e = l.list[k];
      ++seen[i];
      CHECK(e.param == s.master.data_ptr<float>());
      CHECK(e.grad == s.grad.data_ptr());
      CHECK(e.exp_avg == st.m[i].data_ptr<float>());
      CHECK(e.exp_avg_sq == st.v[i].data_ptr<float>());
      CHECK(e.param16 == (s.param16.defined() ? s.param16.data_ptr() : nullptr));
      CHECK(e.numel == s.master.numel());
      CHECK(*zero::detail::kernel_dtype(s.grad.scalar_type()) == l.grad_type);
      if (s.param16.defined())
        CHECK(*zero::detail::kernel_dtype(s.param16.scalar_type()) == l.param16_type);
    }
  }
  CHECK((seen == std::map<size_t, int>{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}}));
  // bf16 grads (0, 2), fp32 grads with a bf16 param16 (1, 4), fp16 (3): three launches.
  CHECK(launches.size() == 3);
}

TEST_CASE("a 16-bit copy of the wrong size or dtype keeps a shard out of the lists",
          "[core][adam_launch]") {
  std::vector<OptimizerShard> shards{shard(0, 10, at::kFloat, at::kBFloat16, true)};
  States st(shards);
  auto launch_none = [](const AdamLaunch&) { FAIL("nothing fits"); };
  SECTION("numel") {
    shards[0].param16 = at::zeros({9}, at::kBFloat16);
    CHECK((zero::detail::for_each_adam_launch(shards, {0}, st.m, st.v, at::Device(at::kCPU),
                                              launch_none) == std::vector<size_t>{0}));
  }
  SECTION("fp32 is no 16-bit copy") {
    shards[0].param16 = at::zeros({10});
    CHECK((zero::detail::for_each_adam_launch(shards, {0}, st.m, st.v, at::Device(at::kCPU),
                                              launch_none) == std::vector<size_t>{0}));
  }
}

TEST_CASE("the CPU twin over a launch list equals the single-buffer kernels bitwise",
          "[core][adam_launch]") {
  at::manual_seed(2);
  std::vector<OptimizerShard> shards{shard(0, 1003, at::kBFloat16, at::kBFloat16, true),
                                     shard(1, 77, at::kBFloat16, at::kBFloat16, true)};
  States st(shards);
  std::vector<OptimizerShard> ref;
  std::vector<at::Tensor> m_ref, v_ref;
  for (size_t i = 0; i < shards.size(); ++i) {
    OptimizerShard r = shards[i];
    r.master = shards[i].master.clone();
    r.param16 = shards[i].param16.clone();
    ref.push_back(r);
    m_ref.push_back(st.m[i].clone());
    v_ref.push_back(st.v[i].clone());
  }
  zero::OptimizerOptions o;
  o.weight_decay = 0.01;
  const zero::kernels::AdamParams p = zero::adam_params(o, 1e-3, 3, 2.0);
  zero::detail::for_each_adam_launch(
      shards, {0, 1}, st.m, st.v, at::Device(at::kCPU), [&](const AdamLaunch& l) {
        zero::kernels::multi_tensor_adam_cpu(p, l.list.data(), l.list.size(), l.grad_type,
                                             l.param16_type);
      });
  for (size_t i = 0; i < ref.size(); ++i) {
    REQUIRE(
        zero::adam_step_host(p, ref[i].master, ref[i].grad, m_ref[i], v_ref[i], ref[i].param16));
    CHECK(at::equal(shards[i].master, ref[i].master));
    CHECK(at::equal(shards[i].param16, ref[i].param16));
    CHECK(at::equal(st.m[i], m_ref[i]));
    CHECK(at::equal(st.v[i], v_ref[i]));
  }
}

TEST_CASE("ShardOptimizer's bf16 Adam step writes every shard's 16-bit copy",
          "[core][adam_launch]") {
  at::manual_seed(3);
  std::vector<OptimizerShard> shards{shard(0, 512, at::kBFloat16, at::kBFloat16, true),
                                     shard(1, 300, at::kBFloat16, at::kBFloat16, true)};
  std::vector<at::Tensor> before;
  for (const auto& s : shards) before.push_back(s.param16.clone());
  auto opt = zero::ShardOptimizer::create(zero::OptimizerOptions{});
  opt->init_state(shards);
  opt->step(shards, 0.1, 1);
  for (size_t i = 0; i < shards.size(); ++i) {
    CHECK_FALSE(at::equal(shards[i].param16, before[i]));
    CHECK(at::equal(shards[i].param16, shards[i].master.to(at::kBFloat16)));
  }
}
