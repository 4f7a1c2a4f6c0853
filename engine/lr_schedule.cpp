// The LR schedules of lr_schedule.h, each a direct transcription of DeepSpeed's get_lr() at
// last_batch_iteration = step - 1 (see the step convention in the header).
#include <zero/engine/lr_schedule.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include <zero/config/config.h>
#include <zero/error.h>

namespace zero {

LrSchedule::~LrSchedule() = default;

WarmupType parse_warmup_type(const std::string& text) {
  if (text == "log") return WarmupType::kLog;
  if (text == "linear") return WarmupType::kLinear;
  throw ConfigError(detail::str("scheduler.params.warmup_type: '", text,
                                "' is not a warmup type; use \"log\" or \"linear\""));
}

namespace {

constexpr double kPi = 3.14159265358979323846;

void check_step(int64_t step) {
  ZERO_CHECK(step >= 0, UsageError, "LR schedule: step must be >= 0, got ", step);
}

void check_warmup_steps(int64_t warmup_num_steps) {
  ZERO_CHECK(warmup_num_steps > 0, ConfigError,
             "scheduler.params.warmup_num_steps: must be a positive integer, got ",
             warmup_num_steps);
}

// DeepSpeed's warmup fraction at last_batch_iteration `it` (0 <= it < n, n >= 2).
double warmup_gamma(WarmupType type, int64_t it, int64_t n) {
  if (type == WarmupType::kLog)  // DeepSpeed multiplies by a precomputed 1 / ln(n)
    return (1.0 / std::log(static_cast<double>(n))) * std::log(static_cast<double>(it + 1));
  return static_cast<double>(it) / static_cast<double>(n);
}

class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(double lr) : lr_(lr) {}
  double lr_at(int64_t step) const override {
    check_step(step);
    return lr_;
  }
  std::string name() const override { return "constant"; }

 private:
  double lr_;
};

// WarmupLR and WarmupDecayLR: min + (max - min) * gamma; gamma after warmup is 1 (WarmupLR) or
// the linear decay max(0, (total - it) / max(1, total - warmup)) (WarmupDecayLR).
class WarmupLr final : public LrSchedule {
 public:
  WarmupLr(double min_lr, double max_lr, int64_t warmup_num_steps, WarmupType type,
           std::optional<int64_t> total_num_steps)
      : min_lr_(min_lr),
        max_lr_(max_lr),
        warmup_num_steps_(std::max<int64_t>(2, warmup_num_steps)),
        type_(type),
        total_num_steps_(total_num_steps) {}

  double lr_at(int64_t step) const override {
    check_step(step);
    const int64_t it = step - 1;  // DeepSpeed's last_batch_iteration
    if (it < 0) return min_lr_;
    return min_lr_ + (max_lr_ - min_lr_) * gamma(it);
  }
  std::string name() const override { return total_num_steps_ ? "WarmupDecayLR" : "WarmupLR"; }

 private:
  double gamma(int64_t it) const {
    if (it < warmup_num_steps_) return warmup_gamma(type_, it, warmup_num_steps_);
    if (!total_num_steps_) return 1.0;
    const double decay_steps =
        std::max(1.0, static_cast<double>(*total_num_steps_ - warmup_num_steps_));
    return std::max(0.0, static_cast<double>(*total_num_steps_ - it) / decay_steps);
  }

  double min_lr_, max_lr_;
  int64_t warmup_num_steps_;
  WarmupType type_;
  std::optional<int64_t> total_num_steps_;
};

// base_lr * ratio: warmup from warmup_min_ratio to 1, then a cosine to cos_min_ratio, held there.
class WarmupCosineLr final : public LrSchedule {
 public:
  WarmupCosineLr(const SchedulerConfig& p, double base_lr)
      : p_(p),
        type_(parse_warmup_type(p.warmup_type)),
        warmup_num_steps_(std::max<int64_t>(2, p.warmup_num_steps)),
        base_lr_(base_lr) {}

  double lr_at(int64_t step) const override {
    check_step(step);
    return base_lr_ * ratio(step - 1);
  }
  std::string name() const override { return "WarmupCosineLR"; }

 private:
  double ratio(int64_t it) const {
    if (it < 0) return 0.0;
    if (it < warmup_num_steps_) {
      const double r = warmup_gamma(type_, it, warmup_num_steps_);
      return p_.warmup_min_ratio + r * (1.0 - p_.warmup_min_ratio);
    }
    const double real_last_step = static_cast<double>(it - warmup_num_steps_ + 1);
    const double real_total_steps =
        static_cast<double>(std::max<int64_t>(1, p_.total_num_steps - warmup_num_steps_));
    const double progress = std::min(1.0, real_last_step / real_total_steps);
    const double cosine = (1.0 + std::cos(kPi * progress)) / 2.0;
    return std::max(0.0, p_.cos_min_ratio + (1.0 - p_.cos_min_ratio) * cosine);
  }

  SchedulerConfig p_;
  WarmupType type_;
  int64_t warmup_num_steps_;
  double base_lr_;
};

// One triangular cycle (first half up, second half down, optionally in stairs), then a decay.
class OneCycle final : public LrSchedule {
 public:
  explicit OneCycle(const SchedulerConfig& p)
      : p_(p),
        first_step_size_(static_cast<double>(p.cycle_first_step_size)),
        second_step_size_(
            static_cast<double>(p.cycle_second_step_size.value_or(p.cycle_first_step_size))),
        total_size_(first_step_size_ + second_step_size_),
        step_ratio_(first_step_size_ / total_size_),
        second_stair_count_(p.cycle_second_stair_count.value_or(p.cycle_first_stair_count)),
        skip_lr_decay_(p.decay_step_size == 0 || p.decay_lr_rate == 0.0),
        skip_mom_decay_(p.decay_step_size == 0 || p.decay_mom_rate == 0.0) {}

  double lr_at(int64_t step) const override {
    check_step(step);
    const int64_t it = step - 1;
    if (static_cast<double>(it) < total_size_)
      return p_.cycle_min_lr + (p_.cycle_max_lr - p_.cycle_min_lr) * scale_factor(it);
    if (skip_lr_decay_) return p_.cycle_min_lr;
    const double interval =
        static_cast<double>(decay_iteration(it)) / static_cast<double>(p_.decay_step_size);
    return p_.cycle_min_lr / (1.0 + p_.decay_lr_rate * interval);
  }

  std::optional<double> momentum_at(int64_t step) const override {
    check_step(step);
    if (!p_.cycle_momentum) return std::nullopt;
    const int64_t it = step - 1;
    // DeepSpeed's constructor writes cycle_min_mom, although the formula at it = -1 gives max.
    if (it < 0) return p_.cycle_min_mom;
    if (static_cast<double>(it) < total_size_)
      return p_.cycle_max_mom - (p_.cycle_max_mom - p_.cycle_min_mom) * scale_factor(it);
    if (skip_mom_decay_) return p_.cycle_max_mom;
    const double interval =
        static_cast<double>(decay_iteration(it)) / static_cast<double>(p_.decay_step_size);
    return p_.cycle_max_mom * (1.0 + p_.decay_mom_rate * interval);
  }
  std::string name() const override { return "OneCycle"; }

 private:
  int64_t decay_iteration(int64_t it) const { return it - static_cast<int64_t>(total_size_) + 1; }

  double scale_factor(int64_t it) const {
    const double batch_iteration = static_cast<double>(it + 1);
    const double cycle = std::floor(1.0 + batch_iteration / total_size_);
    const double x = 1.0 + batch_iteration / total_size_ - cycle;
    double scale;
    int64_t stair_count;
    if (x <= step_ratio_) {
      scale = x / step_ratio_;
      stair_count = p_.cycle_first_stair_count;
    } else {
      scale = (x - 1.0) / (step_ratio_ - 1.0);
      stair_count = second_stair_count_;
    }
    if (stair_count > 0) {  // quantised from the integer offset in the cycle, as DeepSpeed does
      const double cycle_iteration = std::fmod(batch_iteration, total_size_);
      const double position =
          cycle_iteration <= first_step_size_
              ? cycle_iteration * stair_count / first_step_size_
              : (total_size_ - cycle_iteration) * stair_count / second_step_size_;
      scale = std::floor(position) / static_cast<double>(stair_count);
    }
    return scale;
  }

  SchedulerConfig p_;
  double first_step_size_, second_step_size_, total_size_, step_ratio_;
  int64_t second_stair_count_;
  bool skip_lr_decay_, skip_mom_decay_;
};

// min_lr * (1 + rate * interval), interval = steps / step_size (floored when staircase).
class LrRangeTest final : public LrSchedule {
 public:
  explicit LrRangeTest(const SchedulerConfig& p) : p_(p) {}
  double lr_at(int64_t step) const override {
    check_step(step);
    double interval = static_cast<double>(step) / static_cast<double>(p_.lr_range_test_step_size);
    if (p_.lr_range_test_staircase) interval = std::floor(interval);
    return p_.lr_range_test_min_lr * (1.0 + p_.lr_range_test_step_rate * interval);
  }
  std::string name() const override { return "LRRangeTest"; }

 private:
  SchedulerConfig p_;
};

// A schedule resumed at DeepSpeed's `last_batch_iteration` = L >= 0: DeepSpeed then leaves the
// optimizer's lr alone at construction and the first step() moves to L + 1.
class ResumedSchedule final : public LrSchedule {
 public:
  ResumedSchedule(std::unique_ptr<LrSchedule> inner, int64_t last_batch_iteration, double base_lr)
      : inner_(std::move(inner)), last_batch_iteration_(last_batch_iteration), base_lr_(base_lr) {}
  double lr_at(int64_t step) const override {
    check_step(step);
    return step == 0 ? base_lr_ : inner_->lr_at(last_batch_iteration_ + 1 + step);
  }
  std::optional<double> momentum_at(int64_t step) const override {
    check_step(step);
    return step == 0 ? std::nullopt : inner_->momentum_at(last_batch_iteration_ + 1 + step);
  }
  std::string name() const override { return inner_->name(); }

 private:
  std::unique_ptr<LrSchedule> inner_;
  int64_t last_batch_iteration_;
  double base_lr_;
};

std::unique_ptr<LrSchedule> create_fresh(const SchedulerConfig& c, double base_lr) {
  if (c.type.empty()) return make_constant_lr(base_lr);
  if (c.type == "WarmupLR") return make_warmup_lr(c, base_lr);
  if (c.type == "WarmupDecayLR") return make_warmup_decay_lr(c);
  if (c.type == "WarmupCosineLR") return make_warmup_cosine_lr(c, base_lr);
  if (c.type == "OneCycle") return make_one_cycle(c);
  if (c.type == "LRRangeTest") return make_lr_range_test(c);
  throw ConfigError(
      detail::str("scheduler.type: '", c.type,
                  "' is not a schedule; use WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle or "
                  "LRRangeTest"));
}

}  // namespace

std::unique_ptr<LrSchedule> LrSchedule::create(const SchedulerConfig& config, double base_lr) {
  auto schedule = create_fresh(config, base_lr);
  ZERO_CHECK(config.last_batch_iteration >= -1, ConfigError,
             "scheduler.params.last_batch_iteration: must be >= -1, got ",
             config.last_batch_iteration);
  if (config.last_batch_iteration == -1 || config.type.empty()) return schedule;
  return std::make_unique<ResumedSchedule>(std::move(schedule), config.last_batch_iteration,
                                           base_lr);
}

std::unique_ptr<LrSchedule> make_constant_lr(double lr) {
  return std::make_unique<ConstantLr>(lr);
}

std::unique_ptr<LrSchedule> make_warmup_lr(const SchedulerConfig& p, double base_lr) {
  check_warmup_steps(p.warmup_num_steps);
  return std::make_unique<WarmupLr>(p.warmup_min_lr, p.warmup_max_lr.value_or(base_lr),
                                    p.warmup_num_steps, parse_warmup_type(p.warmup_type),
                                    std::nullopt);
}

std::unique_ptr<LrSchedule> make_warmup_decay_lr(const SchedulerConfig& p) {
  check_warmup_steps(p.warmup_num_steps);
  ZERO_CHECK(
      p.total_num_steps > 0, ConfigError,
      "scheduler.params.total_num_steps: WarmupDecayLR needs a positive total_num_steps, got ",
      p.total_num_steps);
  return std::make_unique<WarmupLr>(p.warmup_min_lr, p.warmup_max_lr.value_or(0.001),
                                    p.warmup_num_steps, parse_warmup_type(p.warmup_type),
                                    p.total_num_steps);
}

std::unique_ptr<LrSchedule> make_warmup_cosine_lr(const SchedulerConfig& p, double base_lr) {
  check_warmup_steps(p.warmup_num_steps);
  ZERO_CHECK(
      p.total_num_steps > 0, ConfigError,
      "scheduler.params.total_num_steps: WarmupCosineLR needs a positive total_num_steps, got ",
      p.total_num_steps);
  return std::make_unique<WarmupCosineLr>(p, base_lr);
}

std::unique_ptr<LrSchedule> make_one_cycle(const SchedulerConfig& p) {
  ZERO_CHECK(p.cycle_first_step_size > 0, ConfigError,
             "scheduler.params.cycle_first_step_size: must be > 0, got ", p.cycle_first_step_size);
  ZERO_CHECK(p.cycle_second_step_size.value_or(1) > 0, ConfigError,
             "scheduler.params.cycle_second_step_size: must be > 0, got ",
             *p.cycle_second_step_size);
  ZERO_CHECK(p.cycle_first_stair_count >= 0 && p.cycle_second_stair_count.value_or(0) >= 0,
             ConfigError, "scheduler.params.cycle_*_stair_count: must be >= 0");
  ZERO_CHECK(p.decay_step_size >= 0, ConfigError,
             "scheduler.params.decay_step_size: must be >= 0, got ", p.decay_step_size);
  return std::make_unique<OneCycle>(p);
}

std::unique_ptr<LrSchedule> make_lr_range_test(const SchedulerConfig& p) {
  ZERO_CHECK(p.lr_range_test_step_size > 0, ConfigError,
             "scheduler.params.lr_range_test_step_size: must be > 0, got ",
             p.lr_range_test_step_size);
  return std::make_unique<LrRangeTest>(p);
}

}  // namespace zero
