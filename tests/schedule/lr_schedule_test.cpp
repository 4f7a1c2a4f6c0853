// LR schedules at chosen steps, with values worked out by hand to show the behaviour (step =
// scheduler steps taken = DeepSpeed's last_batch_iteration + 1). The reference is DeepSpeed's
// code itself: lr_schedule_deepspeed_test.cpp runs a transcription of lr_schedules.py beside us.
#include <catch2/catch.hpp>

#include <cmath>

#include <zero/config/config.h>
#include <zero/engine/lr_schedule.h>
#include <zero/error.h>

using namespace zero;
using Catch::Approx;

namespace {
double approx_eq(double a, double b) {
  return std::abs(a - b) <= 1e-12 * std::max(1.0, std::abs(b));
}
}  // namespace

TEST_CASE("WarmupLR linear: min at construction, max only after warmup_num_steps") {
  SchedulerConfig p;
  p.warmup_min_lr = 0.1;
  p.warmup_max_lr = 1.1;
  p.warmup_num_steps = 10;
  p.warmup_type = "linear";
  auto s = make_warmup_lr(p, /*base_lr=*/123.0);
  CHECK(s->name() == "WarmupLR");
  CHECK(approx_eq(s->lr_at(0), 0.1));   // constructor: last_batch_iteration = -1
  CHECK(approx_eq(s->lr_at(1), 0.1));   // it = 0: gamma 0
  CHECK(approx_eq(s->lr_at(6), 0.6));   // it = 5: 5/10
  CHECK(approx_eq(s->lr_at(10), 1.0));  // it = 9: 9/10, never max inside warmup
  CHECK(approx_eq(s->lr_at(11), 1.1));  // it = 10: warmup over
  CHECK(approx_eq(s->lr_at(100000), 1.1));
  CHECK(!s->momentum_at(5).has_value());
}

TEST_CASE("WarmupLR log: gamma = ln(it + 1) / ln(n); max defaults to the optimizer lr") {
  SchedulerConfig p;  // min 0, log, max absent
  p.warmup_num_steps = 100;
  auto s = make_warmup_lr(p, /*base_lr=*/0.02);
  CHECK(s->lr_at(0) == 0.0);
  CHECK(s->lr_at(1) == 0.0);              // ln 1 = 0
  CHECK(approx_eq(s->lr_at(10), 0.01));   // ln 10 / ln 100 = 1/2
  CHECK(approx_eq(s->lr_at(100), 0.02));  // it = 99: ln 100 / ln 100
  CHECK(approx_eq(s->lr_at(4), 0.02 * std::log(4.0) / std::log(100.0)));
  CHECK(approx_eq(s->lr_at(5000), 0.02));
}

TEST_CASE("WarmupLR: warmup_num_steps 1 is raised to 2, 0 is rejected") {
  SchedulerConfig p;
  p.warmup_max_lr = 1.0;
  p.warmup_num_steps = 1;
  auto s = make_warmup_lr(p, 0.5);
  CHECK(s->lr_at(1) == 0.0);           // it 0 < 2: ln 1 / ln 2
  CHECK(approx_eq(s->lr_at(2), 1.0));  // it 1 < 2: ln 2 / ln 2; the explicit max wins over base_lr
  CHECK(approx_eq(s->lr_at(3), 1.0));
  p.warmup_num_steps = 0;
  CHECK_THROWS_AS(make_warmup_lr(p, 0.5), ConfigError);
  CHECK_THROWS_AS(parse_warmup_type("cosine"), ConfigError);
  CHECK(parse_warmup_type("linear") == WarmupType::kLinear);
  CHECK(parse_warmup_type("log") == WarmupType::kLog);
  CHECK_THROWS_AS(s->lr_at(-1), UsageError);
}

TEST_CASE("WarmupDecayLR: linear decay (total - it) / (total - warmup), floored at 0") {
  SchedulerConfig p;
  p.total_num_steps = 1000;
  p.warmup_min_lr = 0.0;
  p.warmup_max_lr = 1.0;
  p.warmup_num_steps = 100;
  p.warmup_type = "linear";
  auto s = make_warmup_decay_lr(p);
  CHECK(s->name() == "WarmupDecayLR");
  CHECK(s->lr_at(0) == 0.0);
  CHECK(approx_eq(s->lr_at(100), 0.99));  // it 99: still warming up
  CHECK(approx_eq(s->lr_at(101), 1.0));   // it 100: 900 / 900
  CHECK(approx_eq(s->lr_at(551), 0.5));   // it 550: 450 / 900
  CHECK(approx_eq(s->lr_at(911), 0.1));   // it 910: 90 / 900
  CHECK(s->lr_at(1001) == 0.0);           // it 1000
  CHECK(s->lr_at(2001) == 0.0);           // never negative

  SchedulerConfig defaults;  // DeepSpeed's WarmupDecayLR default max is 0.001, not the optimizer lr
  defaults.total_num_steps = 3000;
  auto d = make_warmup_decay_lr(defaults);
  CHECK(approx_eq(d->lr_at(1001), 0.001));  // it 1000: (3000 - 1000) / 2000
  CHECK(approx_eq(d->lr_at(2001), 0.0005));
  defaults.total_num_steps = 0;
  CHECK_THROWS_AS(make_warmup_decay_lr(defaults), ConfigError);
}

TEST_CASE("WarmupDecayLR: total <= warmup decays over max(1, total - warmup)") {
  SchedulerConfig p;
  p.total_num_steps = 10;
  p.warmup_max_lr = 2.0;
  p.warmup_num_steps = 10;
  p.warmup_type = "linear";
  auto s = make_warmup_decay_lr(p);
  CHECK(approx_eq(s->lr_at(10), 1.8));  // it 9 in warmup
  CHECK(s->lr_at(11) == 0.0);           // it 10: (10 - 10) / 1
}

TEST_CASE("WarmupCosineLR: ratio of the optimizer lr, zero before the first step") {
  SchedulerConfig p;
  p.total_num_steps = 1100;
  p.warmup_num_steps = 100;
  p.warmup_min_ratio = 0.2;
  p.cos_min_ratio = 0.1;
  p.warmup_type = "linear";
  auto s = make_warmup_cosine_lr(p, /*base_lr=*/0.1);
  CHECK(s->name() == "WarmupCosineLR");
  CHECK(s->lr_at(0) == 0.0);             // DeepSpeed: ratio 0 at last_batch_iteration -1
  CHECK(approx_eq(s->lr_at(1), 0.02));   // it 0: 0.2
  CHECK(approx_eq(s->lr_at(51), 0.06));  // it 50: 0.2 + 0.5 * 0.8
  CHECK(approx_eq(s->lr_at(350),
                  0.1 * (0.1 + 0.9 * (1 + std::sqrt(0.5)) / 2)));  // it 349: progress 1/4
  CHECK(approx_eq(s->lr_at(600), 0.055));  // it 599: progress 1/2 -> 0.1 + 0.9 * 0.5
  CHECK(approx_eq(s->lr_at(1100), 0.01));  // it 1099: progress 1
  CHECK(approx_eq(s->lr_at(9000), 0.01));  // clamped, does not rise again
  CHECK(approx_eq(s->lr_at(101), 0.1 * (0.1 + 0.9 * (1 + std::cos(M_PI / 1000)) / 2)));

  SchedulerConfig log_params;  // log warmup, defaults: min ratio 0, cos_min_ratio 1e-4
  log_params.total_num_steps = 200;
  log_params.warmup_num_steps = 100;
  auto l = make_warmup_cosine_lr(log_params, 1.0);
  CHECK(approx_eq(l->lr_at(10), 0.5));                     // it 9: ln 10 / ln 100
  CHECK(approx_eq(l->lr_at(150), 0.0001 + 0.9999 * 0.5));  // it 149: progress 50/100
  log_params.warmup_num_steps = -3;
  CHECK_THROWS_AS(make_warmup_cosine_lr(log_params, 1.0), ConfigError);
}

TEST_CASE("OneCycle: asymmetric cycle, then decay; momentum cycles inversely") {
  SchedulerConfig p;
  p.cycle_min_lr = 0.1;
  p.cycle_max_lr = 1.1;
  p.cycle_first_step_size = 10;
  p.cycle_second_step_size = 20;
  p.decay_step_size = 5;
  p.decay_lr_rate = 0.5;
  p.decay_mom_rate = 0.1;
  auto s = make_one_cycle(p);
  CHECK(s->name() == "OneCycle");
  CHECK(approx_eq(s->lr_at(0), 0.1));
  CHECK(approx_eq(s->lr_at(1), 0.2));         // it 0: batch 1, scale 0.1
  CHECK(approx_eq(s->lr_at(5), 0.6));         // it 4: x = 5/30, scale (1/6)/(1/3)
  CHECK(approx_eq(s->lr_at(10), 1.1));        // it 9: the peak
  CHECK(approx_eq(s->lr_at(20), 0.6));        // it 19: x = 2/3, scale (-1/3)/(-2/3)
  CHECK(approx_eq(s->lr_at(29), 0.15));       // it 28: x = 29/30, scale 0.05
  CHECK(approx_eq(s->lr_at(30), 0.1));        // it 29: last cycle step, x = 0
  CHECK(approx_eq(s->lr_at(31), 0.1 / 1.1));  // it 30: decay it 1, 0.1 / (1 + 0.5 * 1/5)
  CHECK(approx_eq(s->lr_at(40), 0.05));       // it 39: decay it 10, 0.1 / (1 + 0.5 * 2)

  REQUIRE(s->momentum_at(0).has_value());
  CHECK(approx_eq(*s->momentum_at(0), 0.8));          // constructor writes cycle_min_mom
  CHECK(approx_eq(*s->momentum_at(1), 0.89));         // it 0: batch 1, scale (1/30)/(1/3) = 0.1
  CHECK(approx_eq(*s->momentum_at(5), 0.85));         // it 4: scale 1/2
  CHECK(approx_eq(*s->momentum_at(10), 0.8));         // peak lr, lowest momentum
  CHECK(approx_eq(*s->momentum_at(31), 0.9 * 1.02));  // decay: max * (1 + 0.1 * 1/5)
  CHECK(LrSchedule::kCycleBeta2 == 0.99);
}

TEST_CASE(
    "OneCycle: without decay parameters lr stays at min and momentum at max after the cycle") {
  SchedulerConfig p;
  p.cycle_min_lr = 0.01;
  p.cycle_max_lr = 0.03;
  p.cycle_first_step_size = 120;  // second defaults to first: symmetric
  auto s = make_one_cycle(p);
  CHECK(approx_eq(s->lr_at(60), 0.02));  // it 59: batch 60, x = 1/4, scale 1/2
  CHECK(approx_eq(s->lr_at(61), 0.01 + 0.02 * (61.0 / 240) / 0.5));
  CHECK(approx_eq(s->lr_at(121), 0.03 - 0.02 * 1.0 / 120));  // it 120: one step past the peak
  CHECK(approx_eq(s->lr_at(1000), 0.01));
  CHECK(approx_eq(*s->momentum_at(1000), 0.9));
  p.cycle_momentum = false;
  CHECK(!make_one_cycle(p)->momentum_at(3).has_value());
  p.cycle_first_step_size = 0;
  CHECK_THROWS_AS(make_one_cycle(p), ConfigError);
}

TEST_CASE("OneCycle: stair counts hold lr flat on each stair") {
  SchedulerConfig p;
  p.cycle_min_lr = 0.1;
  p.cycle_max_lr = 1.1;
  p.cycle_first_step_size = 10;
  p.cycle_second_step_size = 20;
  p.cycle_first_stair_count = 2;  // second defaults to the first count
  auto s = make_one_cycle(p);
  CHECK(approx_eq(s->lr_at(4), 0.1));  // batch 4: 4 * 2 / 10 = 0.8 -> stair 0
  CHECK(approx_eq(s->lr_at(5), 0.6));  // batch 5: stair 1 of 2
  CHECK(approx_eq(s->lr_at(9), 0.6));
  CHECK(approx_eq(s->lr_at(10), 1.1));  // batch 10: stair 2 of 2
  CHECK(approx_eq(s->lr_at(11), 0.6));  // batch 11: (30 - 11) * 2 / 20 = 1.9
  CHECK(approx_eq(s->lr_at(20), 0.6));  // batch 20: exactly 1
  CHECK(approx_eq(s->lr_at(21), 0.1));  // batch 21: 0.9
  CHECK(approx_eq(*s->momentum_at(5), 0.85));
}

TEST_CASE("LRRangeTest: continuous and staircase") {
  SchedulerConfig p;
  p.lr_range_test_min_lr = 0.01;
  p.lr_range_test_step_size = 10;
  p.lr_range_test_step_rate = 2.0;
  auto s = make_lr_range_test(p);
  CHECK(s->name() == "LRRangeTest");
  CHECK(approx_eq(s->lr_at(0), 0.01));
  CHECK(approx_eq(s->lr_at(5), 0.02));   // 1 + 2 * 0.5
  CHECK(approx_eq(s->lr_at(25), 0.06));  // 1 + 2 * 2.5
  p.lr_range_test_staircase = true;
  auto st = make_lr_range_test(p);
  CHECK(approx_eq(st->lr_at(5), 0.01));
  CHECK(approx_eq(st->lr_at(10), 0.03));
  CHECK(approx_eq(st->lr_at(25), 0.05));
  p.lr_range_test_step_size = 0;
  CHECK_THROWS_AS(make_lr_range_test(p), ConfigError);
}

TEST_CASE("constant schedule") {
  auto s = make_constant_lr(3e-4);
  CHECK(s->lr_at(0) == 3e-4);
  CHECK(s->lr_at(77) == 3e-4);
}

TEST_CASE("LrSchedule::create reads the typed SchedulerConfig") {
  SchedulerConfig c;                                   // defaults as the config parser leaves them
  CHECK(LrSchedule::create(c, 0.3)->lr_at(9) == 0.3);  // no scheduler: the optimizer's lr

  c.type = "WarmupLR";
  c.warmup_num_steps = 100;  // max absent: the optimizer's lr
  auto warmup = LrSchedule::create(c, 0.02);
  CHECK(warmup->name() == "WarmupLR");
  CHECK(approx_eq(warmup->lr_at(10), 0.01));

  c.type = "WarmupDecayLR";  // max absent: DeepSpeed's 0.001, whatever the optimizer's lr
  c.total_num_steps = 300;
  c.warmup_type = "linear";
  auto decay = LrSchedule::create(c, 0.02);
  CHECK(approx_eq(decay->lr_at(51), 0.0005));   // it 50: 50 / 100
  CHECK(approx_eq(decay->lr_at(201), 0.0005));  // it 200: (300 - 200) / 200

  c.type = "WarmupCosineLR";
  c.warmup_min_ratio = 0.5;
  auto cosine = LrSchedule::create(c, 2.0);
  CHECK(approx_eq(cosine->lr_at(51), 2.0 * 0.75));  // it 50: 0.5 + 0.5 * 0.5

  c.type = "OneCycle";
  c.cycle_min_lr = 0.1;
  c.cycle_max_lr = 1.1;
  c.cycle_first_step_size = 10;
  c.cycle_second_step_size = 20;
  auto cycle = LrSchedule::create(c, 5.0);
  CHECK(approx_eq(cycle->lr_at(20), 0.6));
  CHECK(approx_eq(*cycle->momentum_at(5), 0.85));

  c.type = "LRRangeTest";
  c.lr_range_test_min_lr = 0.01;
  c.lr_range_test_step_size = 10;
  c.lr_range_test_step_rate = 2.0;
  CHECK(approx_eq(LrSchedule::create(c, 5.0)->lr_at(5), 0.02));

  c.type = "WarmupLR";
  c.warmup_type = "exponential";
  CHECK_THROWS_AS(LrSchedule::create(c, 0.1), ConfigError);
  c.type = "CosineAnnealing";
  CHECK_THROWS_AS(LrSchedule::create(c, 0.1), ConfigError);
}

TEST_CASE("LrSchedule::create resumes at scheduler.params.last_batch_iteration") {
  SchedulerConfig c;
  c.type = "WarmupLR";
  c.warmup_min_lr = 0.1;
  c.warmup_max_lr = 1.1;
  c.warmup_num_steps = 10;
  c.warmup_type = "linear";
  c.last_batch_iteration = 4;
  auto s = LrSchedule::create(c, 7.0);
  CHECK(s->lr_at(0) == 7.0);           // DeepSpeed leaves the optimizer's lr at construction
  CHECK(approx_eq(s->lr_at(1), 0.6));  // first step(): it 5
  CHECK(approx_eq(s->lr_at(5), 1.0));  // it 9
  CHECK(approx_eq(s->lr_at(6), 1.1));  // it 10
  c.last_batch_iteration = -2;
  CHECK_THROWS_AS(LrSchedule::create(c, 7.0), ConfigError);
}
