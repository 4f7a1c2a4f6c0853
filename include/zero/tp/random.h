// Megatron's model-parallel RNG: randomness inside a tensor-parallel region must differ where
// the activation is split (each rank's heads draw their own dropout masks) and agree where it is
// replicated (every tensor rank drops the same elements of a residual stream). The default
// generator serves the replicated draws (seeded alike on every tensor rank); the tracker holds a
// second state per device, seeded with seed + 2718 + tensor rank as Megatron's
// model_parallel_cuda_manual_seed does, and fork() runs the split draws on it.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace zero::tp {

class RngTracker {
 public:
  // Every state is (re)made from `seed` + 2718 + `tensor_rank` on its device's first fork.
  void seed(uint64_t seed, int tensor_rank);
  bool seeded() const;
  // Runs `fn` with `device`'s default generator holding the tracker's state; the tracker keeps
  // the state `fn` leaves, and the default generator gets its own back, untouched.
  at::Tensor fork(const at::Device& device, const std::function<at::Tensor()>& fn);

  // Everything fork() depends on, for activation checkpointing's recompute and checkpoints.
  struct State {
    std::optional<uint64_t> seed;
    std::map<std::string, at::Tensor> states;  // device string -> generator state
  };
  State state() const;
  void set_state(const State& state);

 private:
  mutable std::mutex mutex_;
  State state_;
  bool forked_ = false;  // fork() is not reentrant
};

// The process's tracker (Megatron's get_cuda_rng_tracker()).
RngTracker& rng_tracker();

// Dropout of an activation split over the tensor group (attention probabilities of this rank's
// heads): the tracker's draws. The identity with p = 0 or when not training.
at::Tensor dropout(const at::Tensor& x, double p, bool training);

}  // namespace zero::tp
