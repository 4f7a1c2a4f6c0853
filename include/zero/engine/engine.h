// The public training facade: zero::initialize(model, ds_config) returns an Engine that owns
// the ZeRO stage, the optimizer on this rank's shards and the LR schedule.
#pragma once

#include <zero/comm/communicator.h>
#include <zero/comm/parallel_grid.h>
#include <zero/comm/comms_log.h>
#include <zero/config/config.h>
#include <zero/engine/activation/activation_checkpointing.h>
#include <zero/error.h>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}

namespace zero {

// A loss that is NaN or infinite in fp32 training: names the step and the rank.
class NonFiniteLossError : public Error {
 public:
  using Error::Error;
};

// This rank's bytes by category, from the tensors it actually holds.
struct MemoryReport {
  int64_t parameters_bytes = 0;     // parameters kept between uses (full, or stage 3 shard)
  int64_t gradients_bytes = 0;      // full gradients (stages 0-1) or gradient shard (2-3)
  int64_t master_params_bytes = 0;  // fp32 master copies (0 in fp32 training: the params are it)
  int64_t optimizer_states_bytes = 0;
  int64_t comm_buffers_bytes = 0;          // bucket / all-gather staging
  int64_t gathered_params_bytes = 0;       // stage 3: gathered right now
  int64_t peak_gathered_params_bytes = 0;  // stage 3: the most gathered at once so far
  // stage 3: memory of released units kept for the next gathers of the same size (at most two
  // of the largest blocks and the rest of the model), so that a step allocates nothing new.
  int64_t kept_params_bytes = 0;
  int64_t unit_gathers = 0;  // stage 3: unit all-gathers started so far (a count, not bytes)
  // hpZ (zero_hpz_partition_size): the unit gathers within the secondary group among those, and
  // the secondary slices held right now (until the next step).
  int64_t secondary_gathers = 0;
  int64_t secondary_params_bytes = 0;
  std::string zeropp;  // the ZeRO++ features in effect ("hpZ 2, qwZ"); empty: none
  // MiCS (mics_shard_size): the ranks of each shard group and the groups holding copies of each
  // shard (the model states above are one rank's: 1/mics_shard_size of the model); 0: off.
  int mics_shard_size = 0;
  int mics_replicas = 0;
  // offload_optimizer / offload_param: what lives in host memory or swap files instead (the
  // fields above are the device's; on a CPU-only run both are the process's memory).
  int64_t host_parameters_bytes = 0;  // stage 3 parameter shards kept in host memory
  int64_t host_master_params_bytes = 0;
  int64_t host_optimizer_states_bytes = 0;
  int64_t host_gradients_bytes = 0;  // fp32 copies of the gradient shard
  int64_t host_buffers_bytes = 0;    // staging and swap pipeline buffers
  int64_t nvme_bytes = 0;            // swap files: masters and moments, parameter shards
  // Activation checkpoints (zero::Checkpointed): the inputs they hold now and at most so far,
  // where the model computes and (cpu_checkpointing on a GPU) in host memory.
  int64_t activation_checkpoint_bytes = 0;
  int64_t peak_activation_checkpoint_bytes = 0;
  int64_t host_activation_checkpoint_bytes = 0;
  int64_t peak_host_activation_checkpoint_bytes = 0;
  int64_t model_states_bytes() const {  // on the device
    return parameters_bytes + gradients_bytes + master_params_bytes + optimizer_states_bytes;
  }
  int64_t host_bytes() const {
    return host_parameters_bytes + host_master_params_bytes + host_optimizer_states_bytes +
           host_gradients_bytes + host_buffers_bytes;
  }
  std::string to_string() const;
};

// How load_checkpoint treats the checkpoint (DeepSpeed's load_checkpoint arguments, plus ours).
struct LoadOptions {
  bool load_optimizer_states = true;     // moments and Adam's step count; else they start fresh
  bool load_lr_scheduler_states = true;  // the LR schedule's position
  bool load_module_only = false;  // parameters (and buffers) only: no optimizer, counters, scaler
  bool load_module_strict =
      true;                   // every parameter and buffer of the model and the checkpoint match
  bool allow_reshard = true;  // false: a different world size or stage is an error
  bool verify_checksums = false;  // recompute every file's CRC32C before reading (reads it all)
};

struct LoadedCheckpoint {
  std::string path;  // the checkpoint directory that was loaded
  nlohmann::json client_state = nlohmann::json::object();
};

namespace pipe {
// One micro-batch of a pipeline: the first stage's inputs and the last stage's labels.
struct MicroBatch {
  at::Tensor inputs;
  at::Tensor labels;
};
}  // namespace pipe

class Engine {
 public:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  ~Engine();

  // Runs backward of loss / gradient_accumulation_steps (times the loss scale in fp16, as
  // DeepSpeed does); gradients are reduced as they are produced. Throws UsageError for a
  // non-scalar loss and NonFiniteLossError for a NaN/inf loss where no overflow check can skip
  // the step (fp32; bf16 without check_grad_overflow). Blocks until this micro-step's
  // reductions finished.
  void backward(const at::Tensor& loss);
  // Ends a micro-step. On an accumulation boundary: the overflow check (fp16, or bf16 with
  // check_grad_overflow: inf/NaN anywhere skips the step and updates the loss scale),
  // unscaling and clipping, the optimizer on this rank's shards, publishing the updated
  // parameters, LR schedule. Throws UsageError without a backward() since the last step(),
  // LossScaleError on an overflow at fp16.min_loss_scale.
  void step();
  // Pipelines (the model a zero::pipe::PipelineModule, the grid with pipeline stages): one
  // optimizer step over gradient_accumulation_steps micro-batches run by the schedule (1f1b);
  // `next_micro_batch` is called once per micro-batch, in order, on the first and last stages
  // only. Returns the loss (PipelineOptions::loss_fn) averaged over the micro-batches and data
  // ranks, on every rank. backward() and step() are refused on a pipeline engine.
  double train_batch(const std::function<pipe::MicroBatch()>& next_micro_batch);
  // DeepSpeed's eval_batch: the same micro-batches through the stages without backward (no
  // gradients, no step; the forwards and activation messages of the training schedule, in its
  // order), returning the loss as train_batch does.
  double eval_batch(const std::function<pipe::MicroBatch()>& next_micro_batch);
  void zero_grad();
  bool is_gradient_accumulation_boundary() const;
  int64_t global_steps() const;   // optimizer steps taken, skipped ones included (DeepSpeed)
  int64_t micro_steps() const;    // step() calls so far
  int64_t skipped_steps() const;  // steps skipped because a gradient was inf/NaN
  double loss_scale() const;      // fp16: the current loss scale; 1 otherwise
  double lr() const;              // the learning rate of the next optimizer step
  double last_grad_norm() const;  // global L2 norm before clipping at the last optimizer step
  int rank() const;
  int world_size() const;
  int data_parallel_size() const;    // the ranks ZeRO shards over: world / tensor-parallel degree
  int tensor_parallel_size() const;  // the grid's tensor-parallel degree; 1 without a grid
  int stage() const;
  const Config& config() const;
  MemoryReport memory_report() const;
  // The settings (the ds_config's activation_checkpointing) and counters that the model's
  // zero::Checkpointed blocks use; pass it to zero::checkpoint(fn, x, context) for functions.
  std::shared_ptr<ActivationCheckpointing> activation_checkpointing() const;
  // Writes the program's own scalar (its loss, tokens/s, ...) to the enabled csv_monitor /
  // tensorboard as event `name` (e.g. "Train/Samples/my_loss"), at x = the samples trained so
  // far, or at `samples`. Any rank may call it; rank 0's values are written (DeepSpeed's rule).
  void log_scalar(const std::string& name, double value);
  void log_scalar(const std::string& name, double value, int64_t samples);
  // What the engine cannot see: tokens in one sample (for tokens/s) and the flops of one
  // sample's forward + backward (for achieved TFLOPS; without it the flops profiler's measured
  // forward x 3 is used once it ran). Either may be called any time; 0 clears.
  void set_tokens_per_sample(int64_t tokens);
  void set_flops_per_sample(double flops);
  // The program's own field on the engine's progress line (every steps_per_print steps, rank
  // 0), e.g. set_progress_field("epoch", "0.42"): shown as "epoch=0.42" until set again.
  void set_progress_field(const std::string& name, const std::string& value);
  // comms_logger: this rank's collectives so far in DeepSpeed's log_summary table, printed on
  // rank 0 and returned ("" when comms_logger is off). Also printed when the engine is destroyed.
  std::string comms_summary() const;
  // comms_logger's records on this rank (nullptr when it is off).
  const CommsLog* comms_log() const;

  // Collective: full copies of every trainable parameter (stage 3 gathers each block; a
  // tensor-parallel slice is assembled whole over the tensor group), keyed by the first name
  // under which the model registers it.
  std::vector<std::pair<std::string, at::Tensor>> full_parameters();

  // Checkpoints (docs/checkpoint.md). Collective: every rank calls them with the same arguments.
  // Saves everything the run needs to continue exactly (parameters and fp32 masters, optimizer
  // state and step counts, LR schedule position, loss scaler, step counters, RNG state, the
  // config's hash and `client_state`) as save_dir/<tag>/ (default tag global_step<N>), written
  // to a temporary directory and renamed into place when complete; then save_dir/latest names
  // the tag. Returns the checkpoint's directory. Call it on a gradient accumulation boundary.
  // Throws CheckpointError (the previous checkpoint and `latest` left intact) when any rank
  // cannot write.
  std::string save_checkpoint(const std::string& save_dir, const std::string& tag = "",
                              const nlohmann::json& client_state = nlohmann::json::object());
  // Loads load_dir/<tag> (tag "": the one `latest` names), saved by any world size and stage
  // (and any tensor and pipeline grid: parameters are matched by name, a pipeline's as
  // layers.<i>.<name>); each rank reads only the ranges of its own shard. std::nullopt, with a
  // warning, when tag is empty and there is no `latest` (DeepSpeed's (None, None)). Throws
  // CheckpointError for a missing, corrupt or mismatching checkpoint, naming the file and tensor.
  std::optional<LoadedCheckpoint> load_checkpoint(const std::string& load_dir,
                                                  const std::string& tag = "",
                                                  const LoadOptions& options = {});
  // Rank 0 writes the full parameters and buffers (gathered at stage 3) in the training dtype
  // as one safetensors file save_dir/file_name (DeepSpeed's save_16bit_model; fp32 when
  // training in fp32), atomically, and returns true. As DeepSpeed, at stage 3 with
  // stage3_gather_16bit_weights_on_model_save false it saves nothing, says so on rank 0 and
  // returns false on every rank.
  bool save_16bit_model(const std::string& save_dir,
                        const std::string& file_name = "model.safetensors");
  // When the job is a restart (zerorun --max_restarts sets ZERO_RESTART_COUNT) and the config
  // names checkpoint.save_dir, initialize loads its latest checkpoint (at this world size: the
  // batch sizes of an elastic config keep the global batch): what it loaded (its client_state
  // too), or nullopt (a first run, or nothing saved yet). A zero::DistributedSampler made on
  // this engine continues from the loaded position.
  const std::optional<LoadedCheckpoint>& resumed() const;

 private:
  // checkpoint.save_interval_steps: a checkpoint into checkpoint.save_dir after every that many
  // optimizer steps (step, train_batch).
  void save_if_due();
  friend class DistributedSampler;  // registers itself: its position goes into checkpoints
  std::unique_ptr<Impl> impl_;
};

// Builds the world communicator of `backend` from the environment on first use (zerorun /
// mpirun / Slurm variables, or a single process) and returns the same one afterwards. NCCL uses
// the GPU of LOCAL_RANK. A multi-process job builds one backend: asking for a second one is a
// UsageError (both would rendezvous on MASTER_PORT).
std::shared_ptr<Communicator> world_communicator(Backend backend = Backend::kGloo);

// With the world communicator of the model's device: NCCL when its parameters are on CUDA
// (put the model on cuda:LOCAL_RANK first), Gloo otherwise.
Engine initialize(std::shared_ptr<torch::nn::Module> model, const std::string& config_path,
                  const std::map<std::string, std::string>& overrides = {});
Engine initialize(std::shared_ptr<torch::nn::Module> model, const ParsedConfig& config);
// As above on an explicit communicator (tests run many engines on one world).
Engine initialize(std::shared_ptr<torch::nn::Module> model, const ParsedConfig& config,
                  std::shared_ptr<Communicator> comm);
// Tensor parallelism: the model's zero::tp layers are built on grid.tensor_group(), and ZeRO
// partitions, reduces and gathers over grid.data_group() only (each data group shares one
// tensor rank, so every slice is sharded among the ranks that hold it). Parse the config for the
// whole world (ConfigOptions::world_size = the world's size): its batch arithmetic divides by
// tensor_parallel.autotp_size, which must be the grid's tensor size.
// full_parameters() and save_16bit_model() assemble the whole tensors from the slices (the file
// loads into the same model built without tensor parallelism, and load_state_dict cuts such a
// file into any grid's slices); checkpoints hold the slices and load at any other grid. With
// pipeline stages the model is a zero::pipe::PipelineModule and trains with train_batch (ZeRO
// stages 0 and 1, the 1f1b schedule; the rest refused with a UsageError).
Engine initialize(std::shared_ptr<torch::nn::Module> model, const ParsedConfig& config,
                  const ParallelGrid& grid);
// The same from a ds_config file, resolved for the grid's world.
Engine initialize(std::shared_ptr<torch::nn::Module> model, const std::string& config_path,
                  const ParallelGrid& grid,
                  const std::map<std::string, std::string>& overrides = {});

// The grid a ds_config asks for: tensor_parallel.autotp_size tensor-parallel ranks, the rest
// data-parallel (no pipeline stages yet). Collective over `world` (null: world_communicator()).
// The config must have been resolved for world's size.
ParallelGrid parallel_grid(const Config& config, std::shared_ptr<Communicator> world = nullptr);
// The same from a ds_config file, over world_communicator(backend).
ParallelGrid parallel_grid(const std::string& config_path, Backend backend = Backend::kGloo);

}  // namespace zero
