// Property tests: DeepSpeed's LR schedulers transcribed line by line from
// deepspeed/runtime/lr_schedules.py, run side by side with lr_schedule.cpp over random parameters.
//
// Source: deepspeedai/DeepSpeed, deepspeed/runtime/lr_schedules.py at commit
// 22779f2c6e335b494c90c05917206d3b14510d2d (OneCycle._get_scale_factor with the stair counts of
// PR #8179). 614e3f17a0ca82dfc1ee9aaf887b783cac97a5bb differs only where one optimizer
// param_group cannot tell: WarmupLR keeps the per-group list of lrs for warmup_max_lr=None
// (PR #8171), and it predates #8179 (stair counts ignored).
//
// The transcription models what the DeepSpeed engine does with a scheduler: it is constructed on
// the optimizer (one param_group: its lr and, for Adam-like optimizers, its betas), and
// DeepSpeedEngine._take_model_step calls scheduler.step() after every applied optimizer step.
// So optimizer step k (k = 0, 1, ...) runs with the group's lr after the constructor and k
// step() calls; that must equal LrSchedule::lr_at(k), and the betas momentum_at(k) sets.
// Python's int/float arithmetic is reproduced where it matters (true division of ints, float %,
// math.floor, math.isclose); every value stays far below 2^53, so int -> double is exact.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>

#include <zero/config/config.h>
#include <zero/engine/lr_schedule.h>

#include "deepspeed_lr_schedules.h"

using namespace zero;
namespace ds = zero::test::ds;

namespace {

// ---------------------------------------------------------------------------------------------
// Side by side.

constexpr double kRelTol = 1e-12;

bool close(double ours, double theirs) {
  if (ours == theirs) return true;
  return std::abs(ours - theirs) <= kRelTol * std::max(std::abs(ours), std::abs(theirs));
}

template <typename T>
std::string or_absent(const std::optional<T>& v) {
  if (!v) return "absent";
  std::ostringstream o;
  o.precision(17);
  o << *v;
  return o.str();
}

std::string describe(const SchedulerConfig& c, double base_lr) {
  std::ostringstream o;
  o.precision(17);
  o << c.type << " base_lr=" << base_lr << " last_batch_iteration=" << c.last_batch_iteration
    << " warmup_min_lr=" << c.warmup_min_lr << " warmup_max_lr=" << or_absent(c.warmup_max_lr)
    << " warmup_num_steps=" << c.warmup_num_steps << " warmup_type=" << c.warmup_type
    << " total_num_steps=" << c.total_num_steps << " warmup_min_ratio=" << c.warmup_min_ratio
    << " cos_min_ratio=" << c.cos_min_ratio << " cycle_min_lr=" << c.cycle_min_lr
    << " cycle_max_lr=" << c.cycle_max_lr << " decay_lr_rate=" << c.decay_lr_rate
    << " cycle_first_step_size=" << c.cycle_first_step_size
    << " cycle_second_step_size=" << or_absent(c.cycle_second_step_size)
    << " cycle_first_stair_count=" << c.cycle_first_stair_count
    << " cycle_second_stair_count=" << or_absent(c.cycle_second_stair_count)
    << " decay_step_size=" << c.decay_step_size << " cycle_momentum=" << c.cycle_momentum
    << " cycle_min_mom=" << c.cycle_min_mom << " cycle_max_mom=" << c.cycle_max_mom
    << " decay_mom_rate=" << c.decay_mom_rate << " lr_range_test_min_lr=" << c.lr_range_test_min_lr
    << " lr_range_test_step_size=" << c.lr_range_test_step_size
    << " lr_range_test_step_rate=" << c.lr_range_test_step_rate
    << " lr_range_test_staircase=" << c.lr_range_test_staircase;
  return o.str();
}

// Steps `steps` optimizer steps of our schedule against the DeepSpeed scheduler `Ref` built on
// `optimizer` (already constructed). The engine writes momentum_at(k), when set, as
// (beta1, kCycleBeta2) before step k and otherwise leaves the betas alone. Returns "" when every
// step agrees, else the first disagreement.
template <typename Ref>
std::string first_mismatch(const LrSchedule& ours, Ref& ref, ds::Optimizer& optimizer,
                           std::pair<double, double> config_betas, int64_t steps) {
  std::pair<double, double> engine_betas = config_betas;
  for (int64_t k = 0; k < steps; ++k) {
    const double lr = ours.lr_at(k);
    if (!close(lr, optimizer.lr)) {
      std::ostringstream o;
      o.precision(17);
      o << "optimizer step " << k << ": lr " << lr << ", DeepSpeed " << optimizer.lr;
      return o.str();
    }
    if (const auto beta1 = ours.momentum_at(k)) engine_betas = {*beta1, LrSchedule::kCycleBeta2};
    if (!close(engine_betas.first, optimizer.betas.first) ||
        !close(engine_betas.second, optimizer.betas.second)) {
      std::ostringstream o;
      o.precision(17);
      o << "optimizer step " << k << ": betas (" << engine_betas.first << ", "
        << engine_betas.second << "), DeepSpeed (" << optimizer.betas.first << ", "
        << optimizer.betas.second << ")";
      return o.str();
    }
    ref.step();
  }
  return "";
}

// Random parameters, drawn so that edge cases (1-step warmups, total < warmup, a step size of 1,
// stairs longer than the half cycle, resumption) come up often.
struct Draw {
  std::mt19937_64 rng;
  explicit Draw(uint64_t seed) : rng(seed) {}
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  }
  int64_t integer(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng); }
  double lr() { return std::pow(10.0, uniform(-6, 0)); }
  int64_t steps_up_to(int64_t hi) { return chance(0.2) ? integer(1, 3) : integer(1, hi); }
  int64_t last_batch_iteration() { return chance(0.75) ? -1 : integer(0, 3000); }
  std::string warmup_type() { return chance(0.5) ? "log" : "linear"; }
};

constexpr int kParameterSets = 300;
constexpr int64_t kMinSteps = 4000;

}  // namespace

TEST_CASE("WarmupLR equals DeepSpeed's WarmupLR step by step (random parameters)") {
  Draw d(0x5eed0001);
  for (int set = 0; set < kParameterSets; ++set) {
    SchedulerConfig c;
    c.type = "WarmupLR";
    c.warmup_min_lr = d.chance(0.3) ? 0.0 : d.lr();
    if (d.chance(0.6)) c.warmup_max_lr = d.lr();  // absent: the optimizer's lr
    c.warmup_num_steps = d.steps_up_to(3000);
    c.warmup_type = d.warmup_type();
    c.last_batch_iteration = d.last_batch_iteration();
    const double base_lr = d.lr();
    ds::Optimizer opt{base_lr, true, {0.9, 0.999}};
    ds::WarmupLR ref(opt, c.warmup_min_lr, c.warmup_max_lr, c.warmup_num_steps, c.warmup_type,
                     c.last_batch_iteration);
    const auto ours = LrSchedule::create(c, base_lr);
    INFO(describe(c, base_lr));
    CHECK(first_mismatch(*ours, ref, opt, opt.betas,
                         std::max(kMinSteps, c.warmup_num_steps + 500)) == "");
  }
}

TEST_CASE("WarmupDecayLR equals DeepSpeed's WarmupDecayLR step by step (random parameters)") {
  Draw d(0x5eed0002);
  for (int set = 0; set < kParameterSets; ++set) {
    SchedulerConfig c;
    c.type = "WarmupDecayLR";
    c.warmup_min_lr = d.chance(0.3) ? 0.0 : d.lr();
    if (d.chance(0.6)) c.warmup_max_lr = d.lr();  // absent: 0.001, the signature's default
    c.warmup_num_steps = d.steps_up_to(3000);
    c.total_num_steps = d.chance(0.2) ? d.integer(1, c.warmup_num_steps) : d.steps_up_to(5000);
    c.warmup_type = d.warmup_type();
    c.last_batch_iteration = d.last_batch_iteration();
    const double base_lr = d.lr();
    ds::Optimizer opt{base_lr, true, {0.9, 0.999}};
    ds::WarmupDecayLR ref(opt, c.total_num_steps, c.warmup_min_lr, c.warmup_max_lr.value_or(0.001),
                          c.warmup_num_steps, c.warmup_type, c.last_batch_iteration);
    const auto ours = LrSchedule::create(c, base_lr);
    INFO(describe(c, base_lr));
    CHECK(first_mismatch(*ours, ref, opt, opt.betas,
                         std::max(kMinSteps, c.total_num_steps + 500)) == "");
  }
}

TEST_CASE("WarmupCosineLR equals DeepSpeed's WarmupCosineLR step by step (random parameters)") {
  Draw d(0x5eed0003);
  for (int set = 0; set < kParameterSets; ++set) {
    SchedulerConfig c;
    c.type = "WarmupCosineLR";
    c.warmup_num_steps = d.steps_up_to(3000);
    c.total_num_steps = d.chance(0.2) ? d.integer(1, c.warmup_num_steps) : d.steps_up_to(5000);
    c.warmup_min_ratio = d.chance(0.3) ? 0.0 : d.uniform(0, 1);
    c.cos_min_ratio = d.chance(0.3) ? 0.0001 : d.uniform(0, 1);
    c.warmup_type = d.warmup_type();
    c.last_batch_iteration = d.last_batch_iteration();
    const double base_lr = d.lr();
    ds::Optimizer opt{base_lr, true, {0.9, 0.999}};
    ds::WarmupCosineLR ref(opt, c.total_num_steps, c.warmup_min_ratio, c.warmup_num_steps,
                           c.cos_min_ratio, c.warmup_type, c.last_batch_iteration);
    const auto ours = LrSchedule::create(c, base_lr);
    INFO(describe(c, base_lr));
    CHECK(first_mismatch(*ours, ref, opt, opt.betas,
                         std::max(kMinSteps, c.total_num_steps + 500)) == "");
  }
}

TEST_CASE("OneCycle equals DeepSpeed's OneCycle step by step, lr and betas (random parameters)") {
  Draw d(0x5eed0004);
  for (int set = 0; set < kParameterSets; ++set) {
    SchedulerConfig c;
    c.type = "OneCycle";
    c.cycle_min_lr = d.lr();
    c.cycle_max_lr = d.chance(0.1) ? d.lr() : c.cycle_min_lr * d.uniform(1, 100);
    c.decay_lr_rate = d.chance(0.4) ? 0.0 : d.uniform(0, 2);
    c.cycle_first_step_size = d.steps_up_to(1500);
    if (d.chance(0.6)) c.cycle_second_step_size = d.steps_up_to(1500);
    c.cycle_first_stair_count = d.chance(0.5) ? 0 : d.integer(1, 40);
    if (d.chance(0.4)) c.cycle_second_stair_count = d.chance(0.3) ? 0 : d.integer(1, 40);
    c.decay_step_size = d.chance(0.4) ? 0 : d.steps_up_to(500);
    c.cycle_momentum = d.chance(0.8);
    c.cycle_min_mom = d.uniform(0.5, 0.9);
    c.cycle_max_mom = d.uniform(c.cycle_min_mom, 0.99);
    c.decay_mom_rate = d.chance(0.4) ? 0.0 : d.uniform(0, 0.5);
    c.last_batch_iteration = d.last_batch_iteration();
    const double base_lr = d.lr();
    const std::pair<double, double> config_betas{0.9, 0.999};
    ds::Optimizer opt{base_lr, true, config_betas};
    ds::OneCycle ref(opt, c.cycle_min_lr, c.cycle_max_lr, c.decay_lr_rate, c.cycle_first_step_size,
                     c.cycle_second_step_size, c.cycle_first_stair_count,
                     c.cycle_second_stair_count, c.decay_step_size, c.cycle_momentum,
                     c.cycle_min_mom, c.cycle_max_mom, c.decay_mom_rate, c.last_batch_iteration);
    const auto ours = LrSchedule::create(c, base_lr);
    const int64_t cycle =
        c.cycle_first_step_size + c.cycle_second_step_size.value_or(c.cycle_first_step_size);
    INFO(describe(c, base_lr));
    CHECK(first_mismatch(*ours, ref, opt, config_betas, std::max(kMinSteps, cycle + 1000)) == "");
  }
}

TEST_CASE("LRRangeTest equals DeepSpeed's LRRangeTest step by step (random parameters)") {
  Draw d(0x5eed0005);
  for (int set = 0; set < kParameterSets; ++set) {
    SchedulerConfig c;
    c.type = "LRRangeTest";
    c.lr_range_test_min_lr = d.lr();
    c.lr_range_test_step_size = d.steps_up_to(3000);
    c.lr_range_test_step_rate = d.chance(0.1) ? 0.0 : d.uniform(0, 10);
    c.lr_range_test_staircase = d.chance(0.5);
    c.last_batch_iteration = d.last_batch_iteration();
    const double base_lr = d.lr();
    ds::Optimizer opt{base_lr, true, {0.9, 0.999}};
    ds::LRRangeTest ref(opt, c.lr_range_test_min_lr, c.lr_range_test_step_size,
                        c.lr_range_test_step_rate, c.lr_range_test_staircase,
                        c.last_batch_iteration);
    const auto ours = LrSchedule::create(c, base_lr);
    INFO(describe(c, base_lr));
    CHECK(first_mismatch(*ours, ref, opt, opt.betas, kMinSteps) == "");
  }
}

TEST_CASE("the transcription's own checks: lr before the first step, as DeepSpeed writes it") {
  // What DeepSpeed's constructors leave in the optimizer (last_batch_iteration -1), i.e. the lr
  // of optimizer step 0 and engine.get_lr() before any step: a check that the reference itself
  // reads lr_schedules.py the way the comments above claim.
  ds::Optimizer a{0.5, true, {0.9, 0.999}};
  ds::WarmupLR w(a, 0.1, std::nullopt, 10, "linear", -1);
  CHECK(a.lr == 0.1);
  w.step();  // last_batch_iteration 0: gamma 0 / 10
  CHECK(a.lr == 0.1);
  ds::Optimizer b{0.5, true, {0.9, 0.999}};
  ds::WarmupCosineLR cosine(b, 100, 0.2, 10, 0.0001, "linear", -1);
  CHECK(b.lr == 0.0);
  cosine.step();  // warmup_min_ratio at last_batch_iteration 0
  CHECK(b.lr == 0.5 * 0.2);
  ds::Optimizer e{0.5, true, {0.9, 0.999}};
  ds::OneCycle one(e, 0.1, 1.1, 0, 10, std::nullopt, 0, std::nullopt, 0, true, 0.8, 0.9, 0, -1);
  CHECK(e.lr == 0.1);
  CHECK(e.betas == std::make_pair(0.8, 0.99));
  ds::Optimizer f{0.5, true, {0.9, 0.999}};
  ds::LRRangeTest range(f, 0.01, 10, 2.0, false, 7);  // resumed: the optimizer's lr stays
  CHECK(f.lr == 0.5);
  range.step();  // last_batch_iteration 8: 1 + 2 * 9/10
  CHECK(close(f.lr, 0.01 * 2.8));
}
