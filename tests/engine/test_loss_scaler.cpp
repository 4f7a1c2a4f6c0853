// The loss scaler against DeepSpeed's DynamicLossScaler: transition tests whose expected values
// come from DeepSpeed's update_scale, and a property test running a plain transcription of that
// function side by side with LossScaler over thousands of random overflow sequences.
#include <zero/core/loss_scaler.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

using zero::LossScaler;
using zero::LossScalerOptions;

namespace {

LossScalerOptions dynamic(double initial, int64_t window, int hysteresis, bool consecutive = false,
                          double min_scale = 1.0) {
  LossScalerOptions o;
  o.initial_scale = initial;
  o.scale_window = window;
  o.hysteresis = hysteresis;
  o.consecutive_hysteresis = consecutive;
  o.min_scale = min_scale;
  return o;
}

// Feeds `overflows` and returns the scale after each update.
std::vector<double> run(LossScaler& s, const std::vector<bool>& overflows) {
  std::vector<double> out;
  for (bool o : overflows) {
    s.update(o);
    out.push_back(s.scale());
  }
  return out;
}

// DeepSpeed's DynamicLossScaler, transcribed line by line from
// deepspeedai/DeepSpeed deepspeed/runtime/fp16/loss_scaler.py (commit 18fd4c97),
// DynamicLossScaler.__init__ and DynamicLossScaler.update_scale, with
// raise_error_at_min_scale=True (DeepSpeed's default) and its fixed scale_factor 2.0. Logging
// left out.
struct DeepSpeedDynamicLossScaler {
  double cur_scale;
  int64_t cur_iter = 0;
  int64_t last_overflow_iter = -1;
  double scale_factor = 2.0;
  int64_t scale_window;
  double min_scale;
  int delayed_shift;
  int cur_hysteresis;
  bool consecutive_hysteresis;

  DeepSpeedDynamicLossScaler(double init_scale, int64_t scale_window_, double min_scale_,
                             int delayed_shift_, bool consecutive_hysteresis_)
      : cur_scale(init_scale),
        scale_window(scale_window_),
        min_scale(min_scale_),
        delayed_shift(delayed_shift_),
        cur_hysteresis(delayed_shift_),
        consecutive_hysteresis(consecutive_hysteresis_) {}

  void update_scale(bool overflow) {
    if (overflow) {
      if (delayed_shift == 1 || cur_hysteresis == 1) {
        if (cur_scale == min_scale)
          throw std::runtime_error(
              "Current loss scale already at minimum - cannot decrease scale anymore. Exiting "
              "run.");
        double next_scale = std::max(cur_scale / scale_factor, min_scale);
        cur_scale = next_scale;
      } else {
        cur_hysteresis -= 1;
      }
      last_overflow_iter = cur_iter;
    } else {
      if (consecutive_hysteresis) cur_hysteresis = delayed_shift;
      int64_t stable_interval = (cur_iter - last_overflow_iter) - 1;
      if ((stable_interval > 0) && (stable_interval % scale_window == 0)) {
        if (!consecutive_hysteresis) cur_hysteresis = delayed_shift;
        cur_scale *= scale_factor;
      }
    }
    cur_iter += 1;
  }
};

}  // namespace

TEST_CASE("window 2, no overflows: the scale doubles on the third update") {
  LossScaler s(dynamic(65536, 2, 1));
  CHECK(run(s, {false, false, false, false, false}) ==
        std::vector<double>{65536, 65536, 131072, 131072, 262144});
}

TEST_CASE("window 1 keeps the initial scale after the first clean update, then doubles") {
  LossScaler s(dynamic(65536, 1, 1));
  CHECK(run(s, {false, false, false, false}) == std::vector<double>{65536, 131072, 262144, 524288});
}

TEST_CASE("clean updates double the scale once window updates have passed since the start") {
  LossScaler s(dynamic(1024, 3, 2));
  CHECK(s.scale() == 1024);
  // stable_interval = iteration - (-1) - 1 = iteration: positive multiples of 3 double.
  CHECK(run(s, {false, false, false, false, false, false, false, false, false}) ==
        std::vector<double>{1024, 1024, 1024, 2048, 2048, 2048, 4096, 4096, 4096});
  CHECK(s.iteration() == 9);
}

TEST_CASE("hysteresis: the first overflows only use it up, the last one halves") {
  LossScaler s(dynamic(1024, 1000, 3));
  s.update(true);
  CHECK(s.scale() == 1024);
  CHECK(s.hysteresis_left() == 2);
  s.update(true);
  CHECK(s.scale() == 1024);
  CHECK(s.hysteresis_left() == 1);
  s.update(true);
  CHECK(s.scale() == 512);
  CHECK(s.hysteresis_left() == 1);  // not restored by an overflow
  s.update(true);
  CHECK(s.scale() == 256);
  CHECK(s.last_overflow_iteration() == 3);
}

TEST_CASE("without consecutive_hysteresis a clean step does not restore it; the window does") {
  LossScaler s(dynamic(1024, 3, 2));
  s.update(true);  // iteration 0: hysteresis 2 -> 1, last overflow 0
  CHECK(s.hysteresis_left() == 1);
  s.update(false);  // iteration 1: stable_interval 0
  s.update(false);  // 2: 1
  s.update(false);  // 3: 2
  CHECK(s.hysteresis_left() == 1);
  CHECK(s.scale() == 1024);
  s.update(false);  // iteration 4: stable_interval 3: restore and double
  CHECK(s.hysteresis_left() == 2);
  CHECK(s.scale() == 2048);
  s.update(true);  // hysteresis again absorbs one overflow
  CHECK(s.scale() == 2048);
  CHECK(s.hysteresis_left() == 1);
}

TEST_CASE("a clean step between overflows keeps the hysteresis used up (DeepSpeed default)") {
  LossScaler s(dynamic(1024, 1000, 2));
  CHECK(run(s, {true, false, true}) == std::vector<double>{1024, 1024, 512});
}

TEST_CASE("consecutive_hysteresis restores it after every clean step") {
  LossScaler s(dynamic(1024, 1000, 2, /*consecutive=*/true));
  CHECK(run(s, {true, false, true, false, true, true}) ==
        std::vector<double>{1024, 1024, 1024, 1024, 1024, 512});
  CHECK(s.hysteresis_left() == 1);
}

TEST_CASE("the window restarts at each overflow") {
  LossScaler s(dynamic(64, 2, 1));
  // it0 ovf -> 32 (last 0); it1..3: stable 0, 1, 2 -> doubles at it3; it4 ovf -> 32; it7 -> 64
  CHECK(run(s, {true, false, false, false, true, false, false, false}) ==
        std::vector<double>{32, 32, 32, 64, 32, 32, 32, 64});
}

TEST_CASE("the scale never drops below min_scale and an overflow there is an error") {
  LossScaler s(dynamic(6, 1000, 1, false, 4));
  s.update(true);
  CHECK(s.scale() == 4);  // max(6 / 2, 4)
  CHECK_THROWS_AS(s.update(true), zero::LossScaleError);
  CHECK(s.scale() == 4);  // unchanged after the throw, as DeepSpeed raises before any change
  CHECK(s.iteration() == 1);
  CHECK(s.last_overflow_iteration() == 0);
  try {
    s.update(true);
  } catch (const zero::LossScaleError& e) {
    CHECK(std::string(e.what()).find("minimum loss scale 4") != std::string::npos);
  }
  // A clean update after the refused one goes on from the unchanged state.
  s.update(false);
  CHECK(s.iteration() == 2);
  CHECK(s.scale() == 4);
}

TEST_CASE("with hysteresis left an overflow at min_scale is absorbed, not an error") {
  LossScaler s(dynamic(1, 1000, 2));
  s.update(true);
  CHECK(s.scale() == 1);
  CHECK(s.hysteresis_left() == 1);
  CHECK_THROWS_AS(s.update(true), zero::LossScaleError);
}

TEST_CASE("a static scale never changes") {
  LossScalerOptions o;
  o.dynamic = false;
  o.static_scale = 128;
  LossScaler s(o);
  CHECK(run(s, {true, false, true, true, false}) == std::vector<double>{128, 128, 128, 128, 128});
}

TEST_CASE("bad options are rejected") {
  CHECK_THROWS_AS(LossScaler(dynamic(0, 10, 2)), zero::UsageError);
  CHECK_THROWS_AS(LossScaler(dynamic(8, 0, 2)), zero::UsageError);
  CHECK_THROWS_AS(LossScaler(dynamic(8, 10, 0)), zero::UsageError);
}

TEST_CASE("property: equal to DeepSpeed's update_scale on random overflow sequences") {
  std::mt19937_64 rng(20261202);
  const std::vector<double> initial_scales{65536, 1024, 4096, 6, 3, 1, 0.5, 1u << 20};
  const std::vector<double> min_scales{1, 0.5, 2, 4, 0.25};
  const std::vector<double> overflow_rates{0.02, 0.1, 0.3, 0.6, 0.9};
  int sequences = 0, throws = 0, doublings = 0, halvings = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const double initial = initial_scales[rng() % initial_scales.size()];
    const int64_t window = 1 + static_cast<int64_t>(rng() % 10);
    const double min_scale = min_scales[rng() % min_scales.size()];
    const int hysteresis = 1 + static_cast<int>(rng() % 3);
    const bool consecutive = rng() % 2 == 0;
    const double rate = overflow_rates[rng() % overflow_rates.size()];
    const int length = 1 + static_cast<int>(rng() % 60);
    CAPTURE(trial, initial, window, min_scale, hysteresis, consecutive, rate);

    DeepSpeedDynamicLossScaler ref(initial, window, min_scale, hysteresis, consecutive);
    LossScaler ours(dynamic(initial, window, hysteresis, consecutive, min_scale));
    std::bernoulli_distribution overflow_of(rate);
    for (int u = 0; u < length; ++u) {
      const bool overflow = overflow_of(rng);
      const double before = ref.cur_scale;
      bool ref_threw = false, ours_threw = false;
      try {
        ref.update_scale(overflow);
      } catch (const std::runtime_error&) {
        ref_threw = true;
      }
      try {
        ours.update(overflow);
      } catch (const zero::LossScaleError&) {
        ours_threw = true;
      }
      CAPTURE(u, overflow);
      REQUIRE(ours_threw == ref_threw);
      REQUIRE(ours.scale() == ref.cur_scale);
      REQUIRE(ours.hysteresis_left() == ref.cur_hysteresis);
      REQUIRE(ours.iteration() == ref.cur_iter);
      REQUIRE(ours.last_overflow_iteration() == ref.last_overflow_iter);
      throws += ref_threw;
      doublings += ref.cur_scale > before;
      halvings += ref.cur_scale < before;
    }
    ++sequences;
  }
  // The random sequences reach every branch many times.
  CHECK(sequences == 4000);
  CHECK(throws > 100);
  CHECK(doublings > 1000);
  CHECK(halvings > 1000);
}
