// EngineMonitors: the engine's side of csv_monitor / tensorboard (DeepSpeed's events and ours
// after each optimizer step, the program's own through Engine::log_scalar), rank 0 only.
#pragma once

#include <zero/config/config.h>
#include <zero/engine/engine.h>
#include <zero/monitor/monitor.h>

#include <cstdint>
#include <memory>
#include <string>

namespace zero {

class EngineMonitors {
 public:
  // Checks the monitor sections on every rank (ConfigError where this build cannot honour
  // one); returns the writers on rank 0 when any monitor is enabled, else nullptr.
  static std::unique_ptr<EngineMonitors> create(const Config& config, int rank);

  // After each optimizer step (skipped ones too): writes DeepSpeed's events (train_loss, the
  // engine's window loss, at the samples before the step; lr and, in fp16, loss_scale after it)
  // and ours (grad_norm, skipped_steps, samples/tokens per sec, TFLOPS when the flops are known,
  // the step's time split, memory); flushes every steps_per_print steps.
  void after_step(const Engine::Impl& engine);
  // The program's own scalar at `samples` (Engine::log_scalar).
  void log(const std::string& name, double value, int64_t samples);
  void flush() { monitors_.flush(); }

 private:
  EngineMonitors(const Config& config, monitor::MonitorSet monitors);
  monitor::MonitorSet monitors_;
  int64_t train_batch_size_;
  int64_t steps_per_print_;
  bool fp16_;
};

}  // namespace zero
