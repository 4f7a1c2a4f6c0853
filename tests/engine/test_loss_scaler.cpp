// The loss scaler against DeepSpeed's DynamicLossScaler, transition by transition: hysteresis,
// the growth window counted from the last overflow, consecutive_hysteresis, min_scale, static.
#include <zero/core/loss_scaler.h>

#include <catch2/catch.hpp>

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

}  // namespace

TEST_CASE("clean steps double the scale every window, counted from iteration -1") {
  LossScaler s(dynamic(1024, 3, 2));
  CHECK(s.scale() == 1024);
  // (iter - (-1)) % 3 == 0 at iterations 2, 5, 8.
  CHECK(run(s, {false, false, false, false, false, false, false, false, false}) ==
        std::vector<double>{1024, 1024, 2048, 2048, 2048, 4096, 4096, 4096, 8192});
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
  s.update(true);  // iteration 0: hysteresis 2 -> 1
  CHECK(s.hysteresis_left() == 1);
  s.update(false);  // iteration 1: 1 since the overflow
  CHECK(s.hysteresis_left() == 1);
  s.update(false);  // 2
  CHECK(s.hysteresis_left() == 1);
  s.update(false);  // iteration 3: 3 since the overflow: restore and double
  CHECK(s.hysteresis_left() == 2);
  CHECK(s.scale() == 2048);
  s.update(true);  // hysteresis again absorbs one overflow
  CHECK(s.scale() == 2048);
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
  // it0 ovf -> 32 (last 0); it1: 1 no; it2: 2 -> 64; it3 ovf -> 32 (last 3); it4 no; it5 -> 64
  CHECK(run(s, {true, false, false, true, false, false}) ==
        std::vector<double>{32, 32, 64, 32, 32, 64});
}

TEST_CASE("the scale never drops below min_scale and an overflow there is an error") {
  LossScaler s(dynamic(6, 1000, 1, false, 4));
  s.update(true);
  CHECK(s.scale() == 4);  // max(6 / 2, 4)
  CHECK_THROWS_AS(s.update(true), zero::LossScaleError);
  CHECK(s.scale() == 4);  // unchanged after the throw
  CHECK(s.iteration() == 1);
  try {
    s.update(true);
  } catch (const zero::LossScaleError& e) {
    CHECK(std::string(e.what()).find("minimum loss scale 4") != std::string::npos);
  }
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
