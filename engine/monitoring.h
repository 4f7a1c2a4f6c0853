// EngineMonitors: the engine's side of csv_monitor / tensorboard (DeepSpeed's events and ours
// after each optimizer step, the program's own through Engine::log_scalar), rank 0 only.
#pragma once

#include <zero/config/config.h>
#include <zero/engine/engine.h>
#include <zero/monitor/monitor.h>

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace zero {

class EngineMonitors {
 public:
  // Checks the monitor sections on every rank (ConfigError where this build cannot honour
  // one); returns the writers on rank 0 when any monitor is enabled, else nullptr.
  static std::unique_ptr<EngineMonitors> create(const Config& config, int rank);

  // Adds loss / gradient_accumulation_steps to the accumulation window's loss, as DeepSpeed's
  // backward() does for Train/Samples/train_loss (no host sync: summed on the loss's device).
  void on_backward(const at::Tensor& loss);
  // After each optimizer step (skipped ones too): writes DeepSpeed's events (train_loss at the
  // samples before the step; lr and, in fp16, loss_scale after it) and ours (grad_norm,
  // skipped_steps, samples_per_sec); flushes every steps_per_print steps.
  void after_step(const Engine::Impl& engine);
  // The program's own scalar at `samples` (Engine::log_scalar).
  void log(const std::string& name, double value, int64_t samples);
  void flush() { monitors_.flush(); }

 private:
  EngineMonitors(const Config& config, monitor::MonitorSet monitors);
  monitor::MonitorSet monitors_;
  int64_t train_batch_size_;
  int64_t accumulation_;
  int64_t steps_per_print_;
  bool fp16_;
  at::Tensor loss_sum_;  // this window's sum of loss / accumulation, on the loss's device
  std::chrono::steady_clock::time_point last_step_end_;
};

}  // namespace zero
