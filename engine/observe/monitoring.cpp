// EngineMonitors and Engine::log_scalar: the engine's events in DeepSpeed's names and x axis
// (samples trained so far), written by rank 0 to the monitors of monitor/.
#include "observe/monitoring.h"

#include <zero/monitor/csv_monitor.h>
#include <zero/monitor/tensorboard.h>

#include <ATen/ATen.h>

#include <vector>

#include "engine_impl.h"

namespace zero {

std::unique_ptr<EngineMonitors> EngineMonitors::create(const Config& config, int rank) {
  ZERO_CHECK(!config.tensorboard.enabled || monitor::tensorboard_available(), ConfigError,
             "tensorboard.enabled: this build has no protobuf, so it cannot write TensorBoard "
             "files; rebuild with libprotobuf-dev and protobuf-compiler installed, or use "
             "csv_monitor");
  if (rank != 0 || !(config.csv_monitor.enabled || config.tensorboard.enabled)) return nullptr;
  monitor::MonitorSet set;
  if (config.tensorboard.enabled)
    set.add(std::make_unique<monitor::TensorBoardMonitor>(config.tensorboard.output_path,
                                                          config.tensorboard.job_name));
  if (config.csv_monitor.enabled)
    set.add(std::make_unique<monitor::CsvMonitor>(config.csv_monitor.output_path,
                                                  config.csv_monitor.job_name));
  return std::unique_ptr<EngineMonitors>(new EngineMonitors(config, std::move(set)));
}

EngineMonitors::EngineMonitors(const Config& config, monitor::MonitorSet monitors)
    : monitors_(std::move(monitors)),
      train_batch_size_(config.train_batch_size),
      steps_per_print_(config.steps_per_print),
      fp16_(config.fp16.enabled) {}

void EngineMonitors::after_step(const Engine::Impl& s) {
  const double seconds = s.timers.last_step_ms() / 1000;
  const int64_t samples = s.global_steps * train_batch_size_;  // DeepSpeed's global_samples
  std::vector<monitor::Event> events;
  if (s.window_loss.defined())
    events.push_back({"Train/Samples/train_loss", s.last_loss, samples - train_batch_size_});
  events.push_back({"Train/Samples/lr", s.schedule->lr_at(s.scheduler_steps), samples});
  if (fp16_ && s.scaler) events.push_back({"Train/Samples/loss_scale", s.scaler->scale(), samples});
  events.push_back({"Train/Samples/grad_norm", s.last_grad_norm, samples});
  events.push_back({"Train/Samples/skipped_steps", static_cast<double>(s.skipped_steps), samples});
  if (seconds > 0) {
    const double per_sec = static_cast<double>(train_batch_size_) / seconds;
    events.push_back({"Train/Samples/samples_per_sec", per_sec, samples});
    if (s.tokens_per_sample > 0)
      events.push_back({"Train/Samples/tokens_per_sec",
                        per_sec * static_cast<double>(s.tokens_per_sample), samples});
    if (const double flops = s.flops_per_step_per_rank(); flops > 0)
      events.push_back({"Train/Samples/tflops", flops / seconds / 1e12, samples});
  }
  // The step's time split (ms; fwd + bwd + step = step_time_ms).
  events.push_back({"Train/Samples/step_time_ms", s.timers.last_step_ms(), samples});
  for (TimerPart part : {TimerPart::kFwd, TimerPart::kBwd, TimerPart::kBwdInner,
                         TimerPart::kBwdAllreduce, TimerPart::kStep}) {
    events.push_back({std::string("Train/Samples/time_") + timer_name(part) + "_ms",
                      s.timers.last(part), samples});
  }
  if (s.stage->stage() == 3)
    events.push_back({"Train/Samples/time_stage3_gather_wait_ms",
                      s.timers.last(TimerPart::kGatherWait), samples});
  if (s.optimizer->wants_grad_copies())
    events.push_back(
        {"Train/Samples/time_offload_copy_ms", s.timers.last(TimerPart::kOffloadCopy), samples});
  // This rank's memory (bytes).
  const MemoryReport m = s.memory_report();
  events.push_back(
      {"Train/Samples/model_states_bytes", static_cast<double>(m.model_states_bytes()), samples});
  if (s.stage->stage() == 3)
    events.push_back({"Train/Samples/peak_gathered_bytes",
                      static_cast<double>(m.peak_gathered_params_bytes), samples});
  if (m.host_bytes() > 0)
    events.push_back({"Train/Samples/host_bytes", static_cast<double>(m.host_bytes()), samples});
  monitors_.write(events);
  if (steps_per_print_ > 0 && s.global_steps % steps_per_print_ == 0) monitors_.flush();
}

void EngineMonitors::log(const std::string& name, double value, int64_t samples) {
  monitors_.write({{name, value, samples}});
}

void Engine::log_scalar(const std::string& name, double value) {
  log_scalar(name, value, impl_->global_steps * impl_->config.train_batch_size);
}

void Engine::log_scalar(const std::string& name, double value, int64_t samples) {
  ZERO_CHECK(!name.empty(), UsageError, "log_scalar: empty event name");
  if (impl_->monitors) impl_->monitors->log(name, value, samples);
}

}  // namespace zero
