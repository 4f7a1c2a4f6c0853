// StepTimers: per-step and per-interval sums of the step's parts, and wall_clock_breakdown's
// line (interval means, min and max over ranks through one all-reduce).
#include "observe/step_timers.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <cstdio>

namespace zero {

const char* timer_name(TimerPart part) {
  static const char* const kNames[kTimerParts] = {
      "fwd",          "bwd",           "bwd_inner", "bwd_allreduce", "step", "stage3_gather_wait",
      "offload_copy", "pipe_schedule", "pipe_wait"};
  return kNames[static_cast<int>(part)];
}

namespace {
double ms_between(StepTimers::Clock::time_point a, StepTimers::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

StepTimers::StepTimers() : mark_(Clock::now()), call_start_(mark_), step_start_(mark_) {}

void StepTimers::sync_device_at_boundaries(const at::Device& device) {
  if (device.is_cuda()) sync_index_ = device.index();
}

void StepTimers::sync_device() const {
  if (sync_index_) torch::cuda::synchronize(*sync_index_);
}

void StepTimers::enter() {
  sync_device();
  call_start_ = Clock::now();
  add(TimerPart::kFwd, ms_between(mark_, call_start_));
}

void StepTimers::leave(TimerPart part) {
  sync_device();
  mark_ = Clock::now();
  add(part, ms_between(call_start_, mark_));
}

void StepTimers::end_step() {
  last_step_ms_ = ms_between(step_start_, mark_);
  step_start_ = mark_;
  last_ = step_;
  for (int k = 0; k < kTimerParts; ++k) interval_[k] += step_[k];
  step_.fill(0);
  interval_step_ms_ += last_step_ms_;
  ++interval_steps_;
}

std::string StepTimers::breakdown_line(Communicator& comm, const at::Device& device,
                                       int64_t last_step) {
  const double steps = interval_steps_ > 0 ? static_cast<double>(interval_steps_) : 1.0;
  // [means..., step total, -means..., -step total]: one kMax gives max and min.
  constexpr int kValues = kTimerParts + 1;
  at::Tensor t = at::empty({2 * kValues}, at::TensorOptions().dtype(at::kDouble));
  double* v = t.data_ptr<double>();
  for (int k = 0; k < kTimerParts; ++k) v[k] = interval_[k] / steps;
  v[kTimerParts] = interval_step_ms_ / steps;
  for (int k = 0; k < kValues; ++k) v[kValues + k] = -v[k];
  const std::vector<double> mine(v, v + kValues);
  if (comm.world_size() > 1) {
    // Collectives take fp32 (and NCCL device tensors).
    at::Tensor wire = t.to(at::TensorOptions().dtype(at::kFloat).device(device));
    comm.all_reduce(wire, ReduceOp::kMax)->wait();
    t = wire.to(at::TensorOptions().dtype(at::kDouble).device(at::kCPU));
    v = t.data_ptr<double>();
  }
  std::string line = "time (ms)";
  char buf[128];
  auto put = [&](const char* name, int k) {
    std::snprintf(buf, sizeof buf, " | %s: %.2f (%.2f..%.2f)", name, mine[k], -v[kValues + k],
                  v[k]);
    line += buf;
  };
  for (int k = 0; k < kTimerParts; ++k) {
    // Ours only where they happened on some rank (stage 3 gathers, offloaded optimizers,
    // pipelines); a pipeline's backward() and step() parts: its bwd ones never happen.
    const auto part = static_cast<TimerPart>(k);
    const bool ours = part == TimerPart::kGatherWait || part == TimerPart::kOffloadCopy ||
                      part == TimerPart::kPipeSchedule || part == TimerPart::kPipeWait;
    const bool backward_part =
        part == TimerPart::kBwd || part == TimerPart::kBwdInner || part == TimerPart::kBwdAllreduce;
    if ((ours || backward_part) && v[k] <= 0) continue;
    put(timer_name(part), k);
  }
  put("total", kTimerParts);
  std::snprintf(buf, sizeof buf, " | mean per step of steps %lld-%lld, (min..max) over %d ranks",
                static_cast<long long>(last_step - interval_steps_ + 1),
                static_cast<long long>(last_step), comm.world_size());
  line += buf;
  interval_.fill(0);
  interval_step_ms_ = 0;
  interval_steps_ = 0;
  return line;
}

}  // namespace zero
