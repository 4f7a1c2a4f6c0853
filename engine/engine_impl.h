// Engine::Impl: the engine's state, shared by the files that implement Engine (the training
// step in engine.cpp, checkpoints in checkpoint_save.cpp / checkpoint_load.cpp).
#pragma once

#include <zero/core/loss_scaler.h>
#include <zero/core/optimizer.h>
#include <zero/core/stage.h>
#include <zero/engine/engine.h>
#include <zero/engine/lr_schedule.h>
#include <zero/engine/sharded.h>

#include <torch/nn/module.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "monitoring.h"

namespace zero {

namespace detail {
// Gives every zero::Checkpointed block of the model the engine's activation checkpointing
// settings and counters; logs (rank 0) which settings have no effect on this model or device.
std::shared_ptr<ActivationCheckpointing> attach_checkpoints(torch::nn::Module& model,
                                                            const Config& config, int rank,
                                                            const at::Device& device);
}  // namespace detail

struct Engine::Impl {
  std::shared_ptr<torch::nn::Module> model;
  Config config;
  std::shared_ptr<Communicator> comm;
  std::vector<at::Tensor> params;  // layout order
  std::vector<std::string> names;  // layout order
  std::vector<ShardedImpl*> wrappers;
  std::unique_ptr<Stage> stage;
  std::unique_ptr<ShardOptimizer> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  int64_t micro_steps = 0;
  int64_t global_steps = 0;     // optimizer steps attempted, skipped ones included (DeepSpeed)
  int64_t skipped_steps = 0;    // steps skipped for inf/NaN gradients
  int64_t optimizer_steps = 0;  // updates applied: Adam's bias-correction count
  int64_t scheduler_steps = 0;  // the LR schedule's position: does not advance on a skip
  bool backward_since_step = false;
  double last_grad_norm = 0;
  bool cycle_momentum = false;  // the schedule sets beta1 (and beta2) before each step
  at::ScalarType compute_dtype = at::kFloat;
  std::optional<LossScaler> scaler;  // fp16 only
  bool check_overflow = false;       // fp16, or bf16 with check_grad_overflow: skip on inf/NaN
  std::unique_ptr<EngineMonitors> monitors;  // csv_monitor / tensorboard (rank 0); else null
  std::shared_ptr<ActivationCheckpointing> activations;  // the model's checkpoints report here

  ~Impl() {
    for (ShardedImpl* w : wrappers) w->attach(nullptr, -1);
  }
  bool boundary() const { return (micro_steps + 1) % config.gradient_accumulation_steps == 0; }
  double global_grad_norm(const std::vector<OptimizerShard>& shards) const;
  // The stage's shards with each master where it lives (the optimizer's, when offloaded).
  std::vector<OptimizerShard> optimizer_shards() const;
  void optimizer_step();
  void report_progress() const;
};

}  // namespace zero
