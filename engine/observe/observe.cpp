// The engine's observers: timers around backward()/step(), comms_logger on the communicator,
// the flops profiler at profile_step, the progress line and wall_clock_breakdown every
// steps_per_print steps, and the Engine methods through which the program adds what it knows.
#include <zero/engine/engine.h>
#include <zero/engine/sharded.h>

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "engine_impl.h"

#include <zero/comm/hierarchical_communicator.h>
#include <zero/engine/host_pool.h>

namespace zero {

namespace {

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string number(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

}  // namespace

Engine::Impl::~Impl() {
  detail::unregister_engine_model(this);
  for (ShardedImpl* w : wrappers) {
    w->attach(nullptr, -1);
    w->observe(nullptr, "");
  }
  if (comms_log) {
    if (comm->rank() == 0) std::cout << comms_log->summary() << std::flush;
    for (Communicator* c : groups())
      if (c->comms_log() == comms_log) c->set_comms_log(nullptr);  // not a later engine's
  }
}

void Engine::Impl::observe_before_stage() {
  const CommsLoggerConfig& c = config.comms_logger;
  if (!c.enabled) return;
  CommsLogOptions o;
  o.verbose = c.verbose;
  o.prof_all = c.prof_all;
  o.debug = c.debug;
  o.prof_ops = c.prof_ops;
  o.rank = comm->rank();
  comms_log = std::make_shared<CommsLog>(o);
  for (Communicator* c : groups()) c->set_comms_log(comms_log);
}

std::vector<Communicator*> Engine::Impl::groups() const {
  std::vector<Communicator*> out;
  std::vector<Communicator*> all;
  for (const auto* g : {&comm, &data, &tensor, &pipe_group})
    if (*g) all.push_back(g->get());
  // A hierarchical wrapper runs its all-reduces on the host groups: they record them.
  if (auto* h = dynamic_cast<HierarchicalCommunicator*>(reducing.get()))
    for (Communicator* c : h->members()) all.push_back(c);
  for (Communicator* g : all)
    if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  return out;
}

void Engine::Impl::observe_after_init() {
  // Blocks report their gather waits and open a module scope the flops profiler sees.
  for (const auto& item : model->named_modules("", /*include_self=*/false))
    if (auto* w = dynamic_cast<ShardedImpl*>(item.value().get())) w->observe(&timers, item.key());
  if (config.flops_profiler.enabled && comm->rank() == 0 &&
      config.flops_profiler.profile_step == 0) {
    flops = std::make_unique<FlopsProfiler>();
    flops->start();
  }
  timers = StepTimers();
  interval_start = std::chrono::steady_clock::now();
}

void Engine::Impl::before_backward(const at::Tensor& loss) {
  timers.enter();
  if (flops && flops->running()) flops->stop();  // the profiled forward ends here
  if (comm->rank() != 0) return;
  at::Tensor part = loss.detach().reshape({}).to(at::kDouble);
  const int64_t gas = config.gradient_accumulation_steps;
  if (gas > 1) part = part / static_cast<double>(gas);
  window_loss = window_loss.defined() ? window_loss + part : part;
}

void Engine::Impl::after_backward() {
  timers.leave(TimerPart::kBwd);
}

// The program's flops are the whole model's: a step's share per rank divides by every rank. The
// profiler measures this rank's own forward, which with tensor parallelism is already its share
// of each sample: divide by the data-parallel ranks only.
double Engine::Impl::flops_per_step_per_rank() const {
  const double batch = static_cast<double>(config.train_batch_size);
  if (flops_per_sample > 0) return flops_per_sample * batch / comm->world_size();
  return measured_flops_per_sample * batch / data->world_size();
}

// After each optimizer step (skipped ones too): close the step's timers, write the events,
// print the progress line and the breakdown every steps_per_print steps, run the profiler.
void Engine::Impl::after_optimizer_step() {
  timers.end_step();
  host_pool_step_boundary();
  const int rank = comm->rank();
  if (rank == 0 && window_loss.defined() &&
      (monitors || (config.steps_per_print > 0 && global_steps % config.steps_per_print == 0)))
    last_loss = window_loss.item<double>();
  if (monitors) monitors->after_step(*this);
  window_loss = at::Tensor();
  const int64_t every = config.steps_per_print;
  const bool print = every > 0 && global_steps % every == 0;
  if (print) report_progress();
  if (print && config.wall_clock_breakdown) {
    CommsLog::CallerScope caller("wall_clock_breakdown");
    const std::string line = timers.breakdown_line(*comm, params[0].device(), global_steps);
    if (rank == 0) spdlog::info("[rank 0] {}", line);
  }
  const FlopsProfilerConfig& fp = config.flops_profiler;
  if (!fp.enabled || rank != 0) return;
  if (flops && !flops->running() && global_steps == fp.profile_step + 1) {
    FlopsReportInfo info;
    info.step = fp.profile_step;
    info.world_size = comm->world_size();
    info.data_parallel_size = data->world_size();
    info.micro_batch = config.train_micro_batch_size_per_gpu;
    for (const at::Tensor& p : params) info.params += p.numel();
    info.bwd_ms = timers.last(TimerPart::kBwd);
    info.step_ms = timers.last(TimerPart::kStep);
    info.iter_ms = timers.last_step_ms();
    info.recompute_fwd_factor = fp.recompute_fwd_factor;
    info.module_depth = fp.module_depth;
    info.top_modules = fp.top_modules;
    info.detailed = fp.detailed;
    for (const auto& item : model->named_modules("", false))
      if (auto* w = dynamic_cast<ShardedImpl*>(item.value().get())) {
        int64_t n = 0;
        for (const at::Tensor& p : w->parameters()) n += p.numel();
        flops->set_module_params(item.key(), n);
      }
    const std::string report = flops_report(*flops, info);
    if (fp.output_file.empty()) {
      std::cout << report << std::flush;
    } else {
      const std::filesystem::path parent = std::filesystem::path(fp.output_file).parent_path();
      std::error_code ec;
      if (!parent.empty()) std::filesystem::create_directories(parent, ec);
      std::ofstream out(fp.output_file, std::ios::trunc);
      out << report;
      ZERO_CHECK(out.good(), IoError, "flops_profiler.output_file: cannot write '", fp.output_file,
                 "'");
    }
    // The forward of one micro-batch, as flops per sample for the next steps' TFLOPS.
    if (info.micro_batch > 0)
      measured_flops_per_sample = (3.0 + fp.recompute_fwd_factor) *
                                  static_cast<double>(flops->total().flops) /
                                  static_cast<double>(info.micro_batch);
    flops.reset();
  } else if (!flops && global_steps == fp.profile_step) {
    flops = std::make_unique<FlopsProfiler>();
    flops->start();
  }
}

// DeepSpeed's progress line (step, skipped, lr, mom) with ours and the program's fields.
void Engine::Impl::report_progress() {
  if (comm->rank() != 0) return;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - interval_start).count();
  const int64_t steps = global_steps - interval_start_step;
  interval_start = now;
  interval_start_step = global_steps;
  std::string mom;
  if (config.optimizer.type == "SGD") {
    mom = number("[%g]", config.optimizer.momentum);
  } else {
    double beta1 = config.optimizer.betas[0];
    if (cycle_momentum)
      if (auto m = schedule->momentum_at(scheduler_steps)) beta1 = *m;
    mom = "[(" + number("%g", beta1) + ", " + number("%g", config.optimizer.betas[1]) + ")]";
  }
  std::string line = detail::str("step=", global_steps, ", skipped=", skipped_steps, ", lr=[",
                                 number("%.6g", schedule->lr_at(scheduler_steps)), "] (step ",
                                 global_steps + 1, "'s), mom=", mom);
  line += ", loss=" + number("%.4f", last_loss);
  line += ", grad_norm=" + number("%.4g", last_grad_norm);
  if (scaler) line += ", loss_scale=" + number("%g", scaler->scale());
  if (seconds > 0 && steps > 0) {
    const double samples_per_s = static_cast<double>(steps * config.train_batch_size) / seconds;
    line += ", samples/s=" + number("%.1f", samples_per_s);
    if (tokens_per_sample > 0)
      line +=
          ", tokens/s=" + number("%.0f", samples_per_s * static_cast<double>(tokens_per_sample));
    if (const double f = flops_per_step_per_rank(); f > 0)
      line += ", TFLOPS=" + number("%.4f", f * static_cast<double>(steps) / seconds / 1e12);
  }
  const MemoryReport m = memory_report();
  line += ", model_states=" + mib(m.model_states_bytes());
  if (stage->stage() == 3) line += ", peak_gathered=" + mib(m.peak_gathered_params_bytes);
  if (m.host_bytes() > 0) line += ", host=" + mib(m.host_bytes());
  if (tensor_size > 1)  // the figures are rank 0's, which holds 1/tp of each split matrix
    line += detail::str(", grid=tp", tensor_size, "xdp", data->world_size());
  if (!zeropp.empty()) line += ", zero++=[" + zeropp + "]";
  if (m.mics_shard_size > 0)
    line += detail::str(", mics=", m.mics_shard_size, "x", m.mics_replicas);
  for (const auto& [name, value] : progress_fields) line += ", " + name + "=" + value;
  spdlog::info("[rank 0] {}", line);
  if (config.activation_checkpointing.profile)
    spdlog::info("[rank 0] activation checkpointing: {}", activations->describe());
}

void Engine::set_tokens_per_sample(int64_t tokens) {
  ZERO_CHECK(tokens >= 0, UsageError, "set_tokens_per_sample: ", tokens, " < 0");
  impl_->tokens_per_sample = tokens;
}

void Engine::set_flops_per_sample(double flops) {
  ZERO_CHECK(flops >= 0, UsageError, "set_flops_per_sample: ", flops, " < 0");
  impl_->flops_per_sample = flops;
}

void Engine::set_progress_field(const std::string& name, const std::string& value) {
  ZERO_CHECK(!name.empty(), UsageError, "set_progress_field: empty name");
  for (auto& field : impl_->progress_fields)
    if (field.first == name) {
      field.second = value;
      return;
    }
  impl_->progress_fields.emplace_back(name, value);
}

std::string Engine::comms_summary() const {
  if (!impl_->comms_log) return "";
  std::string text = impl_->comms_log->summary();
  if (impl_->comm->rank() == 0) std::cout << text << std::flush;
  return text;
}

const CommsLog* Engine::comms_log() const {
  return impl_->comms_log.get();
}

}  // namespace zero
