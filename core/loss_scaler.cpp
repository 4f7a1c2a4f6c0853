// LossScaler: DeepSpeed's static and dynamic loss scaling state machine
// (deepspeed/runtime/fp16/loss_scaler.py, DynamicLossScaler.update_scale).
#include <zero/core/loss_scaler.h>

#include <algorithm>

namespace zero {

LossScaler::LossScaler(const LossScalerOptions& o) : options_(o) {
  ZERO_CHECK(o.dynamic || o.static_scale > 0, UsageError, "static loss scale must be > 0, got ",
             o.static_scale);
  ZERO_CHECK(!o.dynamic || o.initial_scale > 0, UsageError, "initial loss scale must be > 0, got ",
             o.initial_scale);
  ZERO_CHECK(o.scale_window >= 1, UsageError, "loss scale window must be >= 1, got ",
             o.scale_window);
  ZERO_CHECK(o.hysteresis >= 1, UsageError, "hysteresis must be >= 1, got ", o.hysteresis);
  ZERO_CHECK(o.min_scale > 0, UsageError, "min loss scale must be > 0, got ", o.min_scale);
  scale_ = o.dynamic ? o.initial_scale : o.static_scale;
  hysteresis_left_ = o.hysteresis;
}

void LossScaler::update(bool overflow) {
  if (!options_.dynamic) {
    ++iteration_;
    return;
  }
  if (overflow) {
    if (options_.hysteresis == 1 || hysteresis_left_ == 1) {
      if (scale_ == options_.min_scale)
        throw LossScaleError(detail::str(
            "fp16: gradient overflow at the minimum loss scale ", options_.min_scale,
            " (fp16.min_loss_scale) at iteration ", iteration_,
            ": the scale cannot be lowered further. The model produces inf/NaN gradients even "
            "unscaled; lower the learning rate, check the data, or train in bf16"));
      scale_ = std::max(scale_ / options_.scale_factor, options_.min_scale);
    } else {
      --hysteresis_left_;
    }
    last_overflow_iteration_ = iteration_;
  } else {
    if (options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
    // DeepSpeed's stable_interval: the clean updates since the last overflow (or the start)
    // before this one, so the scale doubles on the (window + 1)-th clean update.
    const int64_t stable_interval = iteration_ - last_overflow_iteration_ - 1;
    if (stable_interval > 0 && stable_interval % options_.scale_window == 0) {
      if (!options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
      scale_ *= options_.scale_factor;
    }
  }
  ++iteration_;
}

void LossScaler::restore(const State& st) {
  ZERO_CHECK(st.scale > 0, UsageError, "loss scaler state: scale must be > 0, got ", st.scale);
  ZERO_CHECK(
      !options_.dynamic || (st.hysteresis_left >= 1 && st.hysteresis_left <= options_.hysteresis),
      UsageError, "loss scaler state: hysteresis left ", st.hysteresis_left, " outside [1, ",
      options_.hysteresis, "] (fp16.hysteresis)");
  ZERO_CHECK(st.iteration >= 0 && st.last_overflow_iteration >= -1 &&
                 st.last_overflow_iteration < st.iteration,
             UsageError, "loss scaler state: last overflow at iteration ",
             st.last_overflow_iteration, " is not before iteration ", st.iteration);
  scale_ = options_.dynamic ? st.scale : options_.static_scale;
  hysteresis_left_ = st.hysteresis_left;
  iteration_ = st.iteration;
  last_overflow_iteration_ = st.last_overflow_iteration;
}

std::string LossScaler::describe() const {
  if (!options_.dynamic) return detail::str("static scale ", scale_);
  return detail::str("scale ", scale_, " (hysteresis ", hysteresis_left_, "/", options_.hysteresis,
                     ", iteration ", iteration_, ")");
}

}  // namespace zero
