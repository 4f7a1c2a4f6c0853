// zero::Sharded: the unit of ZeRO stage 3 sharding. Wrap each block (as FSDP's fully_shard
// wraps a transformer block); its forward gathers the block's parameters, runs, releases them.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <vector>
#include <type_traits>

namespace zero {

class Stage;
class StepTimers;

// Holds any module whose forward takes and returns one tensor. Without an engine, or at
// stages 0-2, it is a plain pass-through. At stage 3: forward = gather (or take the prefetched
// gather), run, release; an autograd node on the output re-gathers before the block's
// backward; the block is released once all its parameter gradients were taken in.
// Parameters outside every wrapped block form one more unit, gathered outside backward (the
// program's own forward code uses them) and released during backward once their gradients are
// in. Releasing frees the block's flat buffer storage (FSDP's way) rather than set_data: the
// parameters and autograd's saved views of them keep their identity and see the re-gathered
// memory, and the memory is really returned even while the graph holds views.
class ShardedImpl : public torch::nn::Module {
 public:
  explicit ShardedImpl(torch::nn::AnyModule inner);
  template <typename M,
            typename = std::enable_if_t<!std::is_same_v<std::decay_t<M>, torch::nn::AnyModule>>>
  explicit ShardedImpl(M module) : ShardedImpl(torch::nn::AnyModule(std::move(module))) {}

  at::Tensor forward(const at::Tensor& input);
  std::shared_ptr<torch::nn::Module> inner() const { return inner_.ptr(); }
  template <typename M>
  std::shared_ptr<M> inner_as() const {
    return std::dynamic_pointer_cast<M>(inner_.ptr());
  }

  // Engine side: bind to a stage and a unit (nullptr detaches). Throws UsageError when
  // already bound to another live engine.
  void attach(Stage* stage, int unit);
  // Engine side: where the block adds the host time it waits for stage 3 gathers (nullptr:
  // nowhere), and its name in the flops profiler's module scopes (its name in the model).
  void observe(StepTimers* timers, const std::string& name);
  int unit() const { return unit_; }
  // Built under zero::Init: this rank's shards of the block's non-persistent layout groups, in
  // layout order, until the engine takes them (the parameters hold no memory meanwhile).
  bool partitioned() const { return partitioned_; }
  std::vector<at::Tensor> take_shards() { return std::move(shards_); }

 private:
  torch::nn::AnyModule inner_;
  Stage* stage_ = nullptr;
  int unit_ = -1;
  StepTimers* timers_ = nullptr;
  std::string scope_name_ = "zero::module zero::Sharded";
  bool partitioned_ = false;
  std::vector<at::Tensor> shards_;
};
TORCH_MODULE(Sharded);

}  // namespace zero
