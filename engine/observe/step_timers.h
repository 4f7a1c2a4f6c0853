// StepTimers: where each optimizer step's wall time goes (DeepSpeed's fwd / bwd / bwd_inner /
// bwd_allreduce / step timers, plus stage 3 gather waits and offload copies), per step and per
// steps_per_print interval; wall_clock_breakdown's line with min/max over ranks.
#pragma once

#include <zero/comm/communicator.h>

#include <c10/core/Device.h>

#include <array>
#include <chrono>
#include <optional>
#include <cstdint>
#include <string>

namespace zero {

// The parts, in DeepSpeed's timer names. fwd, bwd and step tile the step's wall time: fwd is the
// time outside the engine's calls (the program's forward, loss and data), bwd is backward()
// (bwd_inner: autograd; bwd_allreduce: waiting for the reductions after it), step is step().
// gather_wait (stage 3: host time in a block's gathers, in fwd and bwd) and offload_copy
// (gradients copied to the offloaded optimizer as buckets land, in bwd) are parts of those.
// A pipeline's train_batch is pipe_schedule (its forwards, backwards, exchanges and reductions)
// then step; pipe_wait, part of pipe_schedule, is the time in exchanges with the neighbouring
// stages (the bubble, and the messages themselves).
enum class TimerPart {
  kFwd,
  kBwd,
  kBwdInner,
  kBwdAllreduce,
  kStep,
  kGatherWait,
  kOffloadCopy,
  kPipeSchedule,
  kPipeWait
};
constexpr int kTimerParts = 9;
const char* timer_name(TimerPart part);

class StepTimers {
 public:
  using Clock = std::chrono::steady_clock;
  StepTimers();

  // The engine's call boundaries: enter() at the start of backward() / step() (the time since
  // the last leave() is fwd), leave(part) at their end (the call's time goes to `part`).
  void enter();
  void leave(TimerPart part);
  void add(TimerPart part, double ms) { step_[static_cast<int>(part)] += ms; }
  // wall_clock_breakdown with the parameters on a GPU: every part boundary first waits for the
  // device (as DeepSpeed's timers synchronize), so queued kernels count in the part that queued
  // them, not in the first host read that follows. Off by default: a sync costs overlap.
  void sync_device_at_boundaries(const at::Device& device);
  void sync_device() const;
  // After an optimizer step: this step's parts and wall time become the last step's and are
  // added to the interval.
  void end_step();

  double last(TimerPart part) const { return last_[static_cast<int>(part)]; }
  double last_step_ms() const { return last_step_ms_; }
  int64_t interval_steps() const { return interval_steps_; }

  // Collective over `comm` (every rank calls it at the same step): the interval's means per
  // step, as "time (ms) | fwd: 1.23 (1.01..1.50) | ..." with min..max over ranks in brackets,
  // then a fresh interval. The returned line is rank 0's to print.
  // `last_step` (the global step just finished) names the interval in the line.
  std::string breakdown_line(Communicator& comm, const at::Device& device, int64_t last_step);

 private:
  Clock::time_point mark_;  // end of the last engine call
  Clock::time_point call_start_;
  Clock::time_point step_start_;
  std::array<double, kTimerParts> step_{}, last_{}, interval_{};
  double last_step_ms_ = 0, interval_step_ms_ = 0;
  int64_t interval_steps_ = 0;
  std::optional<int64_t> sync_index_;  // the CUDA device to wait for, when set
};

// Times a scope into a part of `timers` (nothing when timers is null).
class ScopedPart {
 public:
  ScopedPart(StepTimers* timers, TimerPart part) : timers_(timers), part_(part) {
    if (timers_) timers_->sync_device();
    start_ = StepTimers::Clock::now();
  }
  ~ScopedPart() {
    if (!timers_) return;
    timers_->sync_device();
    timers_->add(
        part_,
        std::chrono::duration<double, std::milli>(StepTimers::Clock::now() - start_).count());
  }
  ScopedPart(const ScopedPart&) = delete;
  ScopedPart& operator=(const ScopedPart&) = delete;

 private:
  StepTimers* timers_;
  TimerPart part_;
  StepTimers::Clock::time_point start_;
};

}  // namespace zero
