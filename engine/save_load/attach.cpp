// zero::initialize's part of activation checkpointing: the model's zero::Checkpointed blocks get
// the engine's settings and counters, and settings that cannot act on this run are reported.
#include "engine_impl.h"

#include <zero/engine/activation/checkpointed.h>

#include <spdlog/spdlog.h>

namespace zero::detail {

std::shared_ptr<ActivationCheckpointing> attach_checkpoints(torch::nn::Module& model,
                                                            const Config& config, int rank,
                                                            const at::Device& device,
                                                            std::shared_ptr<Communicator> tensor) {
  const ActivationCheckpointingConfig& c = config.activation_checkpointing;
  auto context = std::make_shared<ActivationCheckpointing>(c);
  const bool partition = c.partition_activations && tensor && tensor->world_size() > 1;
  if (partition) context->partition_over(tensor);
  int found = 0;
  for (const auto& m : model.modules(/*include_self=*/true))
    if (auto* block = dynamic_cast<CheckpointedImpl*>(m.get())) {
      block->attach(context);
      ++found;
    }
  const bool asked =
      c.cpu_checkpointing || c.profile || c.synchronize_checkpoint_boundary || partition;
  if (rank != 0) return context;
  if (asked && found == 0)
    spdlog::warn(
        "[rank 0] config: activation_checkpointing: the model has no zero::Checkpointed block, "
        "so these settings act only on zero::checkpoint calls given "
        "engine.activation_checkpointing()");
  if (c.cpu_checkpointing && !device.is_cuda())
    spdlog::info(
        "[rank 0] activation_checkpointing.cpu_checkpointing: the model computes on the CPU, "
        "where checkpointed inputs already are in host memory; nothing is moved");
  if (found > 0)
    spdlog::info(
        "[rank 0] activation checkpointing: {} checkpointed block(s){}{}{}{}", found,
        partition ? fmt::format(", inputs partitioned over {} tensor-parallel ranks",
                                tensor->world_size())
                  : std::string(),
        c.cpu_checkpointing && device.is_cuda() ? ", inputs kept in pinned host memory" : "",
        c.profile ? ", profiled" : "",
        c.synchronize_checkpoint_boundary ? ", synchronized at boundaries" : "");
  return context;
}

}  // namespace zero::detail
