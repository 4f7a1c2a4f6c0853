// EngineMonitors and Engine::log_scalar: the engine's events in DeepSpeed's names and x axis
// (samples trained so far), written by rank 0 to the monitors of monitor/.
#include "monitoring.h"

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
      accumulation_(config.gradient_accumulation_steps),
      steps_per_print_(config.steps_per_print),
      fp16_(config.fp16.enabled),
      last_step_end_(std::chrono::steady_clock::now()) {}

void EngineMonitors::on_backward(const at::Tensor& loss) {
  at::Tensor part = loss.detach().reshape({}).to(at::kDouble);
  if (accumulation_ > 1) part = part / static_cast<double>(accumulation_);
  loss_sum_ = loss_sum_.defined() ? loss_sum_ + part : part;
}

void EngineMonitors::after_step(const Engine::Impl& s) {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_step_end_).count();
  last_step_end_ = now;
  const int64_t samples = s.global_steps * train_batch_size_;  // DeepSpeed's global_samples
  std::vector<monitor::Event> events;
  if (loss_sum_.defined()) {
    events.push_back(
        {"Train/Samples/train_loss", loss_sum_.item<double>(), samples - train_batch_size_});
    loss_sum_ = at::Tensor();
  }
  events.push_back({"Train/Samples/lr", s.schedule->lr_at(s.scheduler_steps), samples});
  if (fp16_ && s.scaler) events.push_back({"Train/Samples/loss_scale", s.scaler->scale(), samples});
  events.push_back({"Train/Samples/grad_norm", s.last_grad_norm, samples});
  events.push_back({"Train/Samples/skipped_steps", static_cast<double>(s.skipped_steps), samples});
  if (seconds > 0)
    events.push_back({"Train/Samples/samples_per_sec",
                      static_cast<double>(train_batch_size_) / seconds, samples});
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
