// Activation checkpointing: zero::Checkpointed(block) and zero::checkpoint(fn, input) keep only a
// block's input in forward and recompute the block in backward, with the forward's RNG state.
#pragma once

#include <zero/engine/activation/activation_checkpointing.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <type_traits>

namespace zero {

// Runs fn(input) without keeping its graph: only `input` is saved (in host memory with
// cpu_checkpointing). Backward restores the CPU RNG state (and the CUDA one of the input's device)
// of the forward, runs fn again with autograd, back-propagates through it and restores the RNG
// state it found, so dropout draws the same mask and the random stream goes on as without
// checkpointing: gradients are bitwise those of fn(input). Parameters fn uses receive their
// gradients during that inner backward. Without grad mode it is just fn(input). `context` holds
// the settings and counters (nullptr: default settings, process-wide counters). Throws
// UsageError in backward when autograd was asked for specific inputs (torch::autograd::grad),
// which a recompute cannot serve.
at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn,
                      const at::Tensor& input,
                      const std::shared_ptr<ActivationCheckpointing>& context = nullptr);

// Holds any module whose forward takes and returns one tensor and checkpoints it; itself such a
// module. Composes with zero::Sharded both ways: Sharded(Checkpointed(block)) is the one to use
// (the recompute runs while the block is gathered for its backward: one gather per backward);
// Checkpointed(Sharded(block)) works too, the recompute gathering the block inside backward.
// zero::initialize attaches the engine's settings (the ds_config's activation_checkpointing).
class CheckpointedImpl : public torch::nn::Module {
 public:
  explicit CheckpointedImpl(torch::nn::AnyModule inner);
  template <typename M,
            typename = std::enable_if_t<!std::is_same_v<std::decay_t<M>, torch::nn::AnyModule>>>
  explicit CheckpointedImpl(M module) : CheckpointedImpl(torch::nn::AnyModule(std::move(module))) {}

  at::Tensor forward(const at::Tensor& input);
  std::shared_ptr<torch::nn::Module> inner() const { return inner_.ptr(); }
  void attach(std::shared_ptr<ActivationCheckpointing> context) { context_ = std::move(context); }

 private:
  torch::nn::AnyModule inner_;
  std::shared_ptr<ActivationCheckpointing> context_;
};
TORCH_MODULE(Checkpointed);

}  // namespace zero
