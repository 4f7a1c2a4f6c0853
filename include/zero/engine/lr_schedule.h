// Learning-rate schedules with DeepSpeed's formulas (deepspeed/runtime/lr_schedules.py):
// WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle (with momentum cycling) and LRRangeTest.
// tests/schedule/lr_schedule_deepspeed_test.cpp checks them step by step against a transcription.
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

// Each schedule from the fields of `config` it uses (its type is not checked); the parameters
// are the ds_config's scheduler `params`, defaults as in DeepSpeed's constructors. Throw
// ConfigError for invalid values. LrSchedule::create dispatches on config.type to these.
std::unique_ptr<LrSchedule> make_constant_lr(double lr);
std::unique_ptr<LrSchedule> make_warmup_lr(const SchedulerConfig& config, double base_lr);
// warmup_max_lr absent: 0.001 (DeepSpeed's WarmupDecayLR default, not the optimizer's lr).
std::unique_ptr<LrSchedule> make_warmup_decay_lr(const SchedulerConfig& config);
std::unique_ptr<LrSchedule> make_warmup_cosine_lr(const SchedulerConfig& config, double base_lr);
std::unique_ptr<LrSchedule> make_one_cycle(const SchedulerConfig& config);
std::unique_ptr<LrSchedule> make_lr_range_test(const SchedulerConfig& config);

// "log" or "linear"; DeepSpeed falls back to log (with a warning) for anything else, we throw.
WarmupType parse_warmup_type(const std::string& text);

}  // namespace zero
