// Horovod's API for programs that keep their own torch::optim optimizer: DistributedOptimizer
// (gradients averaged in fused buckets during backward: ZeRO stage 0's), broadcasts, allreduce.
#pragma once

#include <zero/comm/communicator.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace zero {

struct Config;
class Stage;

// What travels on the wire (Horovod's Compression.none / .fp16; bf16 keeps fp32's range).
enum class Compression { kNone, kFp16, kBf16 };

struct DistributedOptions {
  // Tensor fusion: gradients are reduced in buckets of about this many bytes, each launched as
  // soon as backward has produced all of its gradients (Horovod's HOROVOD_FUSION_THRESHOLD,
  // 64 MiB by default; that variable, or ZERO_FUSION_THRESHOLD, overrides the default).
  int64_t fusion_threshold_bytes = -1;  // < 0: the environment, else 64 MiB
  // Local backward passes summed before the average and the step (gradient accumulation).
  int backward_passes_per_step = 1;
  Compression compression = Compression::kNone;
  // The communicator; null: the process's world communicator for the model's device (the one
  // zero::initialize uses).
  std::shared_ptr<Communicator> comm;

  // From a ds_config: reduce_bucket_size (elements: 2 bytes each with communication_data_type
  // or training in fp16/bf16, else 4), communication_data_type, gradient_accumulation_steps.
  static DistributedOptions from_config(const Config& config);
};

// Wraps `optimizer` (any torch::optim::Optimizer: SGD, Adam, AdamW, RMSprop, Adagrad, a
// subclass) whose parameters belong to `model`. The parameters become views into one flat
// buffer per dtype (stage 0 of the engine) and rank 0's values are broadcast. Then:
//   dist.zero_grad(); loss.backward(); dist.step();
// backward averages each fused bucket over the ranks as soon as it is complete; step() waits
// for the rest and runs the wrapped optimizer. With backward_passes_per_step = N, N backward
// passes are summed locally and only the N-th is reduced (Horovod's semantics: no 1/N).
class DistributedOptimizer {
 public:
  DistributedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, torch::nn::Module& model,
                       DistributedOptions options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Zeroes the gradients; UsageError between a backward and its step.
  void zero_grad();
  // Blocks until every gradient is averaged (Horovod's synchronize()); UsageError unless
  // exactly backward_passes_per_step backward passes ran since the last step.
  void synchronize();
  // synchronize() unless already done, then the wrapped optimizer's step.
  void step();

  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  Communicator& communicator() { return *comm_; }
  int rank() const;
  int size() const;

 private:
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<Stage> stage_;
  int passes_per_step_ = 1;
  bool synchronized_ = false;
};

// Every parameter and buffer of `module` takes root's values (Horovod's broadcast_parameters).
// Collective over the world communicator of the module's device (or `comm`).
void broadcast_parameters(torch::nn::Module& module, int root,
                          std::shared_ptr<Communicator> comm = nullptr);
// The optimizer's state and param-group options (lr, betas, ...) take root's values: what
// optimizer.save() writes on root is loaded on the others, so a subclass takes part through its
// save()/load(). Collective; ranks whose optimizer has no state yet are fine.
void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root,
                               std::shared_ptr<Communicator> comm = nullptr);
// A new tensor: `op` over every rank's `tensor` (for metrics). Collective.
at::Tensor allreduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kAvg,
                     std::shared_ptr<Communicator> comm = nullptr);

}  // namespace zero
