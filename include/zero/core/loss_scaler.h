// The fp16 loss scaler with DeepSpeed's rules: a static scale, or a dynamic one that halves
// after `hysteresis` overflows, doubles once `scale_window` clean updates have passed since the
// last overflow (on the next clean one), and errors instead of halving below min_scale.
#pragma once

#include <zero/error.h>

#include <cstdint>
#include <string>

namespace zero {

// An overflow while the dynamic scale is already at min_loss_scale.
class LossScaleError : public Error {
 public:
  using Error::Error;
};

struct LossScalerOptions {
  bool dynamic = true;
  double static_scale = 1.0;       // the scale when !dynamic (fp16.loss_scale)
  double initial_scale = 65536.0;  // 2^fp16.initial_scale_power
  int64_t scale_window = 1000;     // fp16.loss_scale_window
  int hysteresis = 2;              // fp16.hysteresis (DeepSpeed's delayed_shift)
  bool consecutive_hysteresis = false;
  double min_scale = 1.0;  // fp16.min_loss_scale
  double scale_factor = 2.0;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options);

  double scale() const { return scale_; }
  bool dynamic() const { return options_.dynamic; }
  int hysteresis_left() const { return hysteresis_left_; }
  int64_t iteration() const { return iteration_; }
  int64_t last_overflow_iteration() const { return last_overflow_iteration_; }

  // Records one optimizer step's outcome (`overflow`: inf/NaN in any rank's gradients). A
  // static scaler never changes. Dynamic, exactly as DeepSpeed's DynamicLossScaler:
  //  - overflow with one hysteresis left (or hysteresis 1): scale = max(scale / factor,
  //    min_scale); throws LossScaleError when the scale already is min_scale;
  //  - overflow otherwise: one hysteresis is used up, the scale stays;
  //  - no overflow: consecutive_hysteresis restores the hysteresis; with stable_interval =
  //    iteration - last_overflow_iteration - 1 (last_overflow_iteration starts at -1), a
  //    positive stable_interval divisible by scale_window doubles the scale (and, without
  //    consecutive_hysteresis, restores the hysteresis): the (window + 1)-th clean update after
  //    an overflow or the start doubles it.
  // The state is unchanged when it throws.
  void update(bool overflow);

  // The dynamic state, for checkpoints: restore(state()) continues exactly where it stopped.
  struct State {
    double scale = 1.0;
    int hysteresis_left = 1;
    int64_t iteration = 0;
    int64_t last_overflow_iteration = -1;
  };
  State state() const { return {scale_, hysteresis_left_, iteration_, last_overflow_iteration_}; }
  // Throws UsageError for a state no sequence of updates can reach (scale <= 0, hysteresis
  // outside [1, hysteresis] for a dynamic scaler, last overflow not before the iteration).
  void restore(const State& state);

  // "scale 1024 (hysteresis 2/2, iteration 7)" for logs.
  std::string describe() const;

 private:
  LossScalerOptions options_;
  double scale_ = 1.0;
  int hysteresis_left_ = 1;
  int64_t iteration_ = 0;
  int64_t last_overflow_iteration_ = -1;
};

}  // namespace zero
