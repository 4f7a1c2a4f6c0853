// Engine::Impl: the engine's state, shared by the files that implement Engine (the training
// step in engine.cpp, checkpoints in checkpoint_save.cpp / checkpoint_load.cpp).
#pragma once

#include <unordered_map>
#include <unordered_set>

#include <zero/core/loss_scaler.h>
#include <zero/core/optimizer.h>
#include <zero/core/stage.h>
#include <zero/engine/distributed_sampler.h>
#include <zero/engine/engine.h>
#include <zero/engine/pipe/schedule.h>
#include <zero/engine/lr_schedule.h>
#include <zero/engine/sharded.h>

#include <torch/nn/module.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "observe/flops_profiler.h"
#include "observe/monitoring.h"
#include "observe/step_timers.h"

namespace zero {

namespace pipe {
class PipelineModuleImpl;
}

namespace detail {
// Gives every zero::Checkpointed block of the model the engine's activation checkpointing
// settings and counters; logs (rank 0) which settings have no effect on this model or device.
std::shared_ptr<ActivationCheckpointing> attach_checkpoints(torch::nn::Module& model,
                                                            const Config& config, int rank,
                                                            const at::Device& device,
                                                            std::shared_ptr<Communicator> tensor);
}  // namespace detail

namespace detail {
// Which engine trains which model (load_state_dict.cpp): initialize registers the finished
// engine, ~Impl removes it; engine_of returns nullptr for a model no engine trains.
void register_engine_model(Engine::Impl* impl);
// initialize with the world `comm` and, for tensor parallelism, the grid built on it.
Engine initialize_on(std::shared_ptr<torch::nn::Module> model, const ParsedConfig& parsed,
                     std::shared_ptr<Communicator> comm, const ParallelGrid* grid);
// tensor_parallel.cpp: the parameters the model's zero::tp layers split over the tensor group
// (each tensor rank holds another slice). Throws UsageError, on every rank alike and before any
// collective, when a layer's group is not `grid`'s tensor group, when the model has split layers
// but no grid was given, or when the grid has pipeline stages.
struct SplitLayout {  // how a zero::tp layer splits a parameter (tp::SplitParameter)
  int64_t dim = 0, stride = 1;
};
using SplitDims = std::unordered_map<const c10::TensorImpl*, SplitLayout>;
SplitDims check_tensor_parallel(const torch::nn::Module& model, const ParallelGrid* grid);
// `slice` of a parameter split as `layout` says over `tensor_group`: the whole tensor, assembled
// from every tensor rank's slice. Collective over the group.
at::Tensor whole_of_slices(Communicator& tensor_group, const at::Tensor& slice, SplitLayout layout);
// pipe/full_parameters.cpp: every stage's named tensors (`own`: this stage's, named
// layers.<i>.<name>) on every rank, in layer order, a tied layer's once. Collective over the
// pipeline group.
std::vector<std::pair<std::string, at::Tensor>> pipeline_gather_stages(
    const Engine::Impl& s, std::vector<std::pair<std::string, at::Tensor>> own);
void unregister_engine_model(const Engine::Impl* impl);
// The launcher's restart count of this job: ZERO_RESTART_COUNT (zerorun --max_restarts), else
// TORCHELASTIC_RESTART_COUNT (torchrun); 0 on a first run. UsageError for a malformed value.
int restart_count();
Engine::Impl* engine_of(const torch::nn::Module& model);
}  // namespace detail

struct Engine::Impl {
  std::shared_ptr<torch::nn::Module> model;
  Config config;
  std::shared_ptr<Communicator> comm;  // the world: rank-0 prints, agreement, file identity
  // The data-parallel group ZeRO shards over: comm itself without tensor parallelism.
  std::shared_ptr<Communicator> data;
  // What the stage reduces over: `data` (with MiCS its shard group), or its hierarchical
  // wrapper across hosts.
  std::shared_ptr<Communicator> reducing;
  // The program's zero::DistributedSampler (null: none), whose position checkpoints carry, and
  // the position the last load found when no sampler was registered yet (null: none).
  DistributedSampler* sampler = nullptr;
  nlohmann::json loaded_sampler_state;
  // What initialize loaded when the job was a restart (checkpoint.save_dir).
  std::optional<LoadedCheckpoint> resumed;
  // MiCS: the ranks holding this rank's shards in the other shard groups (null without MiCS).
  std::shared_ptr<Communicator> replicas;
  // This rank's shard of the layout: its data rank, or with MiCS its place in its shard group
  // (data ranks 0 .. shard size - 1, the first replica, save the shards).
  int shard_rank() const { return data->rank() % stage->layout().world_size(); }
  int tensor_rank = 0, tensor_size = 1;  // this rank in the tensor-parallel group
  std::shared_ptr<Communicator> tensor;  // the tensor-parallel group (null without a grid)
  // Pipelines: the model, its stage's group (null without stages) and their number.
  pipe::PipelineModuleImpl* pipeline = nullptr;
  std::shared_ptr<Communicator> pipe_group;
  int pipeline_size = 1;
  std::vector<pipe::Instruction> pipe_program;       // this stage's schedule for one batch
  std::vector<pipe::Instruction> pipe_eval_program;  // its forward part (eval_batch)
  // train_batch (train) or eval_batch: runs `program` (executor.cpp).
  double run_pipeline(const std::vector<pipe::Instruction>& program,
                      const std::function<pipe::MicroBatch()>& next_micro_batch, bool train);
  // The first batch checked that what crosses stages in 1/tp slices is equal on the tensor ranks.
  bool pipe_slices_checked = false;
  // Tied layers this stage holds with other stages: the group of those stages' ranks (of this
  // data and tensor rank) and the tied parameters (layout indices), in tie-key order.
  struct Tie {
    std::shared_ptr<Communicator> group;
    std::vector<int> params;
  };
  std::vector<Tie> ties;
  detail::SplitDims split_dims;    // the parameters the tensor group splits, and along what
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

  // What watches the run (observe.cpp): timers, comms logger, flops profiler, progress line.
  StepTimers timers;
  std::shared_ptr<CommsLog> comms_log;   // comms_logger.enabled; else null
  std::unique_ptr<FlopsProfiler> flops;  // rank 0 while profiling, until reported
  int64_t tokens_per_sample = 0;         // the program's (set_tokens_per_sample)
  double flops_per_sample = 0;           // the program's, forward + backward
  double measured_flops_per_sample = 0;  // the flops profiler's forward x (3 + recompute)
  std::vector<std::pair<std::string, std::string>> progress_fields;  // the program's
  std::string zeropp;      // the ZeRO++ features in effect ("hpZ 2, qwZ"); empty: none
  at::Tensor window_loss;  // rank 0: this step's sum of loss / accumulation (on its device)
  double last_loss = 0;    // rank 0: the last step's window loss, when read
  at::Tensor norm_sum;     // the all-reduced sum of squares: one fp32 element, made once
  int64_t interval_start_step = 0;
  std::chrono::steady_clock::time_point interval_start = std::chrono::steady_clock::now();

  ~Impl();
  bool boundary() const { return (micro_steps + 1) % config.gradient_accumulation_steps == 0; }
  double global_grad_norm(const std::vector<OptimizerShard>& shards);
  // The stage's shards with each master where it lives (the optimizer's, when offloaded).
  std::vector<OptimizerShard> optimizer_shards() const;
  void optimizer_step();
  // zero_optimization.ignore_unused_parameters false: throws UsageError on every rank when a
  // trainable parameter got no gradient on some rank since the last step. Collective.
  void check_unused_parameters() const;
  // The parameters (indices into `params`) whose gradients a backward from `loss` cannot reach;
  // none when the graph holds a checkpoint (its block's graph is made during backward).
  std::vector<int> params_outside_graph(const at::Tensor& loss) const;
  MemoryReport memory_report() const;
  // The engine's communicators, each once: the world, the data, tensor and pipeline groups.
  std::vector<Communicator*> groups() const;
  // observe.cpp: set up before the stage exists / after the engine is built; the calls around
  // backward() and step(); what happens after each optimizer step.
  void observe_before_stage();
  void observe_after_init();
  void before_backward(const at::Tensor& loss);
  void after_backward();
  void after_optimizer_step();
  void report_progress();
  double flops_per_step_per_rank() const;
};

}  // namespace zero
