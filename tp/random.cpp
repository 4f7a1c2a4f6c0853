// The model-parallel RNG tracker of random.h: fork() swaps the tracker's state into the device's
// default generator (under its mutex), runs, and swaps it back out.
#include <zero/tp/random.h>

#include <zero/error.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

namespace zero::tp {
namespace {

at::Generator default_generator(const at::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device)
                          : at::detail::getDefaultCPUGenerator();
}

}  // namespace

void RngTracker::seed(uint64_t seed, int tensor_rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.seed = seed + 2718 + static_cast<uint64_t>(tensor_rank);
  state_.states.clear();
}

bool RngTracker::seeded() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.seed.has_value();
}

at::Tensor RngTracker::fork(const at::Device& device, const std::function<at::Tensor()>& fn) {
  at::Generator gen = default_generator(device);
  const std::string key = device.str();
  at::Tensor own;  // the default generator's state, given back after fn
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ZERO_CHECK(state_.seed, UsageError,
               "zero::tp: the model-parallel RNG tracker has no seed; call "
               "zero::tp::rng_tracker().seed(seed, grid.tensor_rank()) before training");
    ZERO_CHECK(!forked_, UsageError, "zero::tp: RngTracker::fork inside another fork");
    forked_ = true;
    std::lock_guard<std::mutex> gen_lock(gen.mutex());
    own = gen.get_state();
    const auto it = state_.states.find(key);
    if (it == state_.states.end())
      gen.set_current_seed(*state_.seed);
    else
      gen.set_state(it->second);
  }
  auto swap_back = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    std::lock_guard<std::mutex> gen_lock(gen.mutex());
    state_.states[key] = gen.get_state();
    gen.set_state(own);
    forked_ = false;
  };
  at::Tensor out;
  try {
    out = fn();
  } catch (...) {
    swap_back();
    throw;
  }
  swap_back();
  return out;
}

RngTracker::State RngTracker::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  State copy;
  copy.seed = state_.seed;
  for (const auto& [key, s] : state_.states) copy.states[key] = s.clone();
  return copy;
}

void RngTracker::set_state(const State& state) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.seed = state.seed;
  state_.states.clear();
  for (const auto& [key, s] : state.states) state_.states[key] = s.clone();
}

RngTracker& rng_tracker() {
  static RngTracker tracker;
  return tracker;
}

at::Tensor dropout(const at::Tensor& x, double p, bool training) {
  if (p == 0.0 || !training) return x;
  return rng_tracker().fork(x.device(), [&] { return at::dropout(x, p, /*train=*/true); });
}

}  // namespace zero::tp
