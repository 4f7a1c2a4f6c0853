// DeepSpeed's LR schedulers transcribed line by line from deepspeed/runtime/lr_schedules.py (the
// source, commit and what the transcription models: lr_schedule_deepspeed_test.cpp), for the
// property tests that run them side by side with lr_schedule.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace zero::test {

// ---------------------------------------------------------------------------------------------
// The transcription. Names follow lr_schedules.py; `optimizer.lr` / `optimizer.betas` stand for
// optimizer.param_groups[0]['lr'] / ['betas'], `has_betas` for 'betas' in optimizer.defaults.
namespace ds {

struct Optimizer {
  double lr;
  bool has_betas;
  std::pair<double, double> betas;
};

const char* const WARMUP_LOG_RATE = "log";
const char* const WARMUP_LINEAR_RATE = "linear";

// math.isclose(a, b) with its defaults rel_tol=1e-9, abs_tol=0.0 (CPython math_isclose_impl).
inline bool isclose(double a, double b) {
  if (a == b) return true;
  const double diff = std::fabs(b - a);
  return diff <= std::fabs(1e-9 * b) || diff <= std::fabs(1e-9 * a) || diff <= 0.0;
}

// Python's float % (CPython float_rem): the result takes the divisor's sign.
inline double py_mod(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) mod += wx;
  } else {
    mod = std::copysign(0.0, wx);
  }
  return mod;
}

// Python int / int (true division), exact for ints below 2^53.
inline double true_div(int64_t a, int64_t b) {
  return static_cast<double>(a) / static_cast<double>(b);
}

// class LRRangeTest
class LRRangeTest {
 public:
  LRRangeTest(Optimizer& optimizer, double lr_range_test_min_lr = 1e-3,
              int64_t lr_range_test_step_size = 2000, double lr_range_test_step_rate = 1.0,
              bool lr_range_test_staircase = false, int64_t last_batch_iteration = -1)
      : optimizer(optimizer) {
    min_lr = lr_range_test_min_lr;
    step_size = lr_range_test_step_size;
    step_rate = lr_range_test_step_rate;
    this->last_batch_iteration = last_batch_iteration;
    staircase = lr_range_test_staircase;
    if (last_batch_iteration == -1) optimizer.lr = min_lr;
  }
  double _staircase_interval() const {
    return std::floor(static_cast<double>(last_batch_iteration + 1) / step_size);
  }
  double _continuous_interval() const {
    return static_cast<double>(last_batch_iteration + 1) / step_size;
  }
  double _get_increase() const {
    return (1 + step_rate * (staircase ? _staircase_interval() : _continuous_interval()));
  }
  double get_lr() const { return min_lr * _get_increase(); }
  void step() {
    last_batch_iteration = last_batch_iteration + 1;
    optimizer.lr = get_lr();
  }

 private:
  Optimizer& optimizer;
  double min_lr;
  int64_t step_size;
  double step_rate;
  int64_t last_batch_iteration;
  bool staircase;
};

// class OneCycle
class OneCycle {
 public:
  OneCycle(Optimizer& optimizer, double cycle_min_lr, double cycle_max_lr, double decay_lr_rate,
           int64_t cycle_first_step_size, std::optional<int64_t> cycle_second_step_size,
           int64_t cycle_first_stair_count, std::optional<int64_t> cycle_second_stair_count,
           int64_t decay_step_size, bool cycle_momentum, double cycle_min_mom, double cycle_max_mom,
           double decay_mom_rate, int64_t last_batch_iteration)
      : optimizer(optimizer) {
    _initialize_cycle(cycle_first_step_size, cycle_second_step_size, cycle_first_stair_count,
                      cycle_second_stair_count, decay_step_size);
    _initialize_lr(cycle_min_lr, cycle_max_lr, decay_lr_rate, last_batch_iteration);
    this->cycle_momentum = cycle_momentum;
    if (cycle_momentum)
      _initialize_momentum(cycle_min_mom, cycle_max_mom, decay_mom_rate, last_batch_iteration);
    this->last_batch_iteration = last_batch_iteration;
  }

  void step() {
    const int64_t batch_iteration = last_batch_iteration + 1;
    last_batch_iteration = batch_iteration;
    optimizer.lr = get_lr();
    if (cycle_momentum) optimizer.betas = get_mom();
  }

 private:
  void _initialize_cycle(int64_t first, std::optional<int64_t> second, int64_t first_stairs,
                         std::optional<int64_t> second_stairs, int64_t decay_step) {
    const double cycle_first_step_size = static_cast<double>(first);
    const double cycle_second_step_size =
        second ? static_cast<double>(*second) : cycle_first_step_size;
    total_size = cycle_first_step_size + cycle_second_step_size;
    step_ratio = cycle_first_step_size / total_size;
    first_step_size = cycle_first_step_size;
    second_step_size = cycle_second_step_size;
    first_stair_count = first_stairs;
    second_stair_count = !second_stairs ? first_stairs : *second_stairs;
    decay_step_size = decay_step;
    if (isclose(static_cast<double>(decay_step_size), 0)) {
      skip_lr_decay = true;
      skip_mom_decay = true;
    } else {
      skip_lr_decay = false;
      skip_mom_decay = false;
    }
  }
  void _initialize_lr(double cycle_min_lr, double cycle_max_lr, double rate, int64_t lbi) {
    min_lr = cycle_min_lr;
    if (lbi == -1) optimizer.lr = min_lr;
    max_lr = cycle_max_lr;
    decay_lr_rate = rate;
    if (isclose(decay_lr_rate, 0)) skip_lr_decay = true;
  }
  void _initialize_momentum(double cycle_min_mom, double cycle_max_mom, double rate, int64_t lbi) {
    if (!optimizer.has_betas) {  // logger.warning(...)
      cycle_momentum = false;
      return;
    }
    decay_mom_rate = rate;
    min_mom = {cycle_min_mom, 0.99};
    max_mom = {cycle_max_mom, 0.99};
    if (lbi == -1) optimizer.betas = min_mom;
    if (isclose(decay_mom_rate, 0)) skip_mom_decay = true;
  }
  double _get_scale_factor() const {
    const int64_t batch_iteration = (last_batch_iteration + 1);
    const double cycle = std::floor(1 + batch_iteration / total_size);
    const double x = 1. + batch_iteration / total_size - cycle;
    double scale_factor;
    int64_t stair_count;
    if (x <= step_ratio) {
      scale_factor = x / step_ratio;
      stair_count = first_stair_count;
    } else {
      scale_factor = (x - 1) / (step_ratio - 1);
      stair_count = second_stair_count;
    }
    if (stair_count > 0) {
      const double cycle_iteration = py_mod(static_cast<double>(batch_iteration), total_size);
      double stair_position;
      if (cycle_iteration <= first_step_size)
        stair_position = cycle_iteration * stair_count / first_step_size;
      else
        stair_position = (total_size - cycle_iteration) * stair_count / second_step_size;
      scale_factor = std::floor(stair_position) / static_cast<double>(stair_count);
    }
    return scale_factor;
  }
  std::pair<double, double> _get_cycle_mom() const {
    const double scale_factor = _get_scale_factor();
    const double cycle_min_mom = min_mom.first;
    const double cycle_max_mom = max_mom.first;
    const double base_height = (cycle_max_mom - cycle_min_mom) * scale_factor;
    const double momentum = cycle_max_mom - base_height;
    return {momentum, min_mom.second};
  }
  double _get_cycle_lr() const {
    const double scale_factor = _get_scale_factor();
    const double base_height = (max_lr - min_lr) * scale_factor;
    return min_lr + base_height;
  }
  std::pair<double, double> _get_decay_mom(double decay_batch_iteration) const {
    if (skip_mom_decay) return max_mom;
    const double decay_interval = decay_batch_iteration / decay_step_size;
    const double mom_decay_factor = (1 + decay_mom_rate * decay_interval);
    return {max_mom.first * mom_decay_factor, max_mom.second};
  }
  double _get_decay_lr(double decay_batch_iteration) const {
    if (skip_lr_decay) return min_lr;
    const double decay_interval = decay_batch_iteration / decay_step_size;
    const double lr_decay_factor = (1 + decay_lr_rate * decay_interval);
    return min_lr / lr_decay_factor;
  }
  double get_lr() const {
    if (last_batch_iteration < total_size) return _get_cycle_lr();
    return _get_decay_lr(last_batch_iteration - total_size + 1);
  }
  std::pair<double, double> get_mom() const {
    if (last_batch_iteration < total_size) return _get_cycle_mom();
    return _get_decay_mom(last_batch_iteration - total_size + 1);
  }

  Optimizer& optimizer;
  double total_size, step_ratio, first_step_size, second_step_size;
  int64_t first_stair_count, second_stair_count, decay_step_size;
  bool skip_lr_decay, skip_mom_decay;
  double min_lr, max_lr, decay_lr_rate;
  bool cycle_momentum;
  double decay_mom_rate = 0;
  std::pair<double, double> min_mom, max_mom;
  int64_t last_batch_iteration;
};

// class WarmupLR (and, through _get_gamma, class WarmupDecayLR(WarmupLR)). The constructor's
// get_lr() runs at last_batch_iteration -1, which returns min_lrs before reaching _get_gamma, so
// the virtual call never matters there.
class WarmupLR {
 public:
  WarmupLR(Optimizer& optimizer, double warmup_min_lr, std::optional<double> warmup_max_lr,
           int64_t warmup_num_steps, const std::string& warmup_type, int64_t last_batch_iteration)
      : optimizer(optimizer) {
    REQUIRE(warmup_num_steps > 0);  // ValueError otherwise
    if (!warmup_max_lr) warmup_max_lr = optimizer.lr;
    min_lr = warmup_min_lr;
    max_lr = *warmup_max_lr;
    delta_lr = max_lr - min_lr;
    this->warmup_num_steps = std::max<int64_t>(2, warmup_num_steps);
    REQUIRE((warmup_type == WARMUP_LOG_RATE || warmup_type == WARMUP_LINEAR_RATE));
    this->warmup_type = warmup_type;
    inverse_log_warm_up = 1.0 / std::log(static_cast<double>(this->warmup_num_steps));
    this->last_batch_iteration = last_batch_iteration;
    if (last_batch_iteration == -1) optimizer.lr = get_lr();
  }
  virtual ~WarmupLR() = default;

  double get_lr() const {
    if (last_batch_iteration < 0) return min_lr;  // logger.warning(...)
    const double gamma = _get_gamma();
    return min_lr + (delta_lr * gamma);
  }
  void step() {
    last_batch_iteration = last_batch_iteration + 1;
    optimizer.lr = get_lr();
  }

 protected:
  virtual double _get_gamma() const {
    if (last_batch_iteration < warmup_num_steps) {
      if (warmup_type == WARMUP_LOG_RATE)
        return inverse_log_warm_up * std::log(static_cast<double>(last_batch_iteration + 1));
      if (warmup_type == WARMUP_LINEAR_RATE)
        return true_div(last_batch_iteration, warmup_num_steps);
    }
    return 1.0;
  }

  Optimizer& optimizer;
  double min_lr, max_lr, delta_lr;
  int64_t warmup_num_steps;
  std::string warmup_type;
  double inverse_log_warm_up;
  int64_t last_batch_iteration;
};

// class WarmupDecayLR(WarmupLR)
class WarmupDecayLR final : public WarmupLR {
 public:
  WarmupDecayLR(Optimizer& optimizer, int64_t total_num_steps, double warmup_min_lr,
                double warmup_max_lr, int64_t warmup_num_steps, const std::string& warmup_type,
                int64_t last_batch_iteration)
      : WarmupLR(optimizer, warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type,
                 last_batch_iteration),
        total_num_steps(total_num_steps) {}

 private:
  double _get_gamma() const override {
    if (last_batch_iteration < warmup_num_steps) {
      if (warmup_type == WARMUP_LOG_RATE)
        return inverse_log_warm_up * std::log(static_cast<double>(last_batch_iteration + 1));
      if (warmup_type == WARMUP_LINEAR_RATE)
        return true_div(last_batch_iteration, warmup_num_steps);
    }
    return std::max(0.0,
                    static_cast<double>(total_num_steps - last_batch_iteration) /
                        std::max(1.0, static_cast<double>(total_num_steps - warmup_num_steps)));
  }

  int64_t total_num_steps;
};

// class WarmupCosineLR
class WarmupCosineLR {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t total_num_steps, double warmup_min_ratio,
                 int64_t warmup_num_steps, double cos_min_ratio, const std::string& warmup_type,
                 int64_t last_batch_iteration)
      : optimizer(optimizer) {
    REQUIRE(warmup_num_steps > 0);  // ValueError otherwise
    this->total_num_steps = total_num_steps;
    this->last_batch_iteration = last_batch_iteration;
    this->cos_min_ratio = cos_min_ratio;
    REQUIRE((warmup_type == WARMUP_LOG_RATE || warmup_type == WARMUP_LINEAR_RATE));
    this->warmup_type = warmup_type;
    this->warmup_min_ratio = warmup_min_ratio;
    this->warmup_num_steps = std::max<int64_t>(2, warmup_num_steps);
    inverse_log_warm_up = 1.0 / std::log(static_cast<double>(this->warmup_num_steps));
    org_lr = optimizer.lr;
    if (last_batch_iteration == -1) optimizer.lr = get_lr();
  }

  double get_lr_ratio() const {
    if (last_batch_iteration < 0) return 0.0;  // logger.warning(...)
    if (last_batch_iteration < warmup_num_steps) {
      double ratio = 0;
      if (warmup_type == WARMUP_LOG_RATE)
        ratio = inverse_log_warm_up * std::log(static_cast<double>(last_batch_iteration + 1));
      else if (warmup_type == WARMUP_LINEAR_RATE)
        ratio = true_div(last_batch_iteration, warmup_num_steps);
      const double ratio_delta = 1. - warmup_min_ratio;
      ratio = warmup_min_ratio + ratio * ratio_delta;
      return ratio;
    }
    const int64_t real_last_step = last_batch_iteration - warmup_num_steps + 1;
    const int64_t real_total_steps = std::max<int64_t>(1, total_num_steps - warmup_num_steps);
    const double cosine_progress = std::min(1.0, true_div(real_last_step, real_total_steps));
    const double ratio_delta = 1. - cos_min_ratio;
    double ratio = (1 + std::cos(M_PI * cosine_progress)) / 2;
    ratio = std::max(0.0, cos_min_ratio + ratio_delta * ratio);
    return ratio;
  }
  void step() {
    last_batch_iteration = last_batch_iteration + 1;
    optimizer.lr = get_lr();
  }
  double get_lr() const {
    if (last_batch_iteration < 0) return 0.0;  // logger.warning(...)
    const double lr_ratio = get_lr_ratio();
    return org_lr * lr_ratio;
  }

 private:
  Optimizer& optimizer;
  int64_t total_num_steps, last_batch_iteration, warmup_num_steps;
  double cos_min_ratio, warmup_min_ratio, inverse_log_warm_up, org_lr;
  std::string warmup_type;
};

}  // namespace ds

}  // namespace zero::test
