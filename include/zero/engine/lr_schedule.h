// Learning-rate schedules with DeepSpeed's formulas (deepspeed/runtime/lr_schedules.py):
// WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle (with momentum cycling) and LRRangeTest.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace zero {

struct SchedulerConfig;  // <zero/config/config.h>

// Step convention. `step` is the number of scheduler steps taken so far, i.e. DeepSpeed's
// `last_batch_iteration + 1`. lr_at(0) is the value DeepSpeed writes into the optimizer when
// it constructs the scheduler (last_batch_iteration = -1); DeepSpeed steps the scheduler
// after every applied optimizer step (not after a skipped fp16-overflow step), so with no
// skipped steps optimizer step k (k = 0, 1, ...; global_steps() == k before it) runs with
// lr_at(k). Consequences kept from DeepSpeed: WarmupLR/WarmupDecayLR start at warmup_min_lr,
// WarmupCosineLR starts at 0, OneCycle at cycle_min_lr, LRRangeTest at lr_range_test_min_lr.
class LrSchedule {
 public:
  // DeepSpeed sets beta2 to this whenever OneCycle sets the momentum (beta1).
  static constexpr double kCycleBeta2 = 0.99;

  // The schedule named by config.type; an empty type gives a constant base_lr. base_lr is the
  // optimizer's lr: WarmupCosineLR scales it, WarmupLR uses it when warmup_max_lr is absent.
  // Throws ConfigError for an unknown type or invalid parameters.
  static std::unique_ptr<LrSchedule> create(const SchedulerConfig& config, double base_lr);

  virtual ~LrSchedule();
  virtual double lr_at(int64_t step) const = 0;
  // beta1 the schedule sets at `step` (same convention), or nullopt when it leaves momentum
  // alone. Only OneCycle with cycle_momentum cycles it; DeepSpeed then disables cycling for
  // optimizers without betas (SGD) with a warning, which is the engine's decision.
  virtual std::optional<double> momentum_at(int64_t step) const { return std::nullopt; }
  virtual std::string name() const = 0;
};

enum class WarmupType { kLog, kLinear };

// Parameters of each schedule with DeepSpeed's constructor defaults (the ds_config `params`).
struct WarmupLrParams {
  double warmup_min_lr = 0.0;
  std::optional<double> warmup_max_lr;  // absent: the optimizer's lr (WarmupLR only)
  int64_t warmup_num_steps = 1000;      // must be > 0; DeepSpeed uses max(2, n)
  WarmupType warmup_type = WarmupType::kLog;
};
struct WarmupDecayLrParams {
  int64_t total_num_steps = 0;  // required
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
};
struct WarmupCosineLrParams {
  int64_t total_num_steps = 0;  // required
  double warmup_min_ratio = 0.0;
  int64_t warmup_num_steps = 1000;
  double cos_min_ratio = 0.0001;
  WarmupType warmup_type = WarmupType::kLog;
};
struct OneCycleParams {
  double cycle_min_lr = 0.0;  // required
  double cycle_max_lr = 0.0;  // required
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  std::optional<int64_t> cycle_second_step_size;    // absent: cycle_first_step_size
  int64_t cycle_first_stair_count = 0;              // 0: continuous
  std::optional<int64_t> cycle_second_stair_count;  // absent: cycle_first_stair_count
  int64_t decay_step_size = 0;                      // 0: no post-cycle decay
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
};
struct LrRangeTestParams {
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

std::unique_ptr<LrSchedule> make_constant_lr(double lr);
std::unique_ptr<LrSchedule> make_warmup_lr(const WarmupLrParams& params, double base_lr);
std::unique_ptr<LrSchedule> make_warmup_decay_lr(const WarmupDecayLrParams& params);
std::unique_ptr<LrSchedule> make_warmup_cosine_lr(const WarmupCosineLrParams& params,
                                                  double base_lr);
std::unique_ptr<LrSchedule> make_one_cycle(const OneCycleParams& params);
std::unique_ptr<LrSchedule> make_lr_range_test(const LrRangeTestParams& params);

// "log" or "linear"; DeepSpeed falls back to log (with a warning) for anything else, we throw.
WarmupType parse_warmup_type(const std::string& text);

}  // namespace zero
