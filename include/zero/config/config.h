// The typed, validated ds_config: one Config value per DeepSpeed-style JSON file.
// Field names are the ds_config keys; defaults are DeepSpeed's code defaults (docs/config.md).
// A key whose only effect is DeepSpeed's (a Python detail, a performance knob this engine has no
// use for) has no field: the parser reports a value other than ours as "no effect" or refuses it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <zero/config/elasticity.h>
#include <zero/error.h>

namespace zero {

struct ConfigOptions {
  int world_size = 1;   // resolves batch sizes and "auto"
  bool strict = false;  // every warning becomes an error
  // dotted.key -> value text (a JSON literal, or else a bare string). Used for --set and to fill
  // "auto"; an override replaces what the file says (with a warning when it contradicts it).
  std::map<std::string, std::string> overrides;
};

// One problem or warning. `path` is the dotted JSON path ("zero_optimization.stage"), or
// "(root)" for the document itself; line 0 when there is no line (a --set value, a missing key).
struct ConfigDiagnostic {
  std::string file;
  int line = 0;
  std::string path;
  std::string message;
  int column = 0;                 // syntax errors only
  std::string to_string() const;  // "FILE:LINE: path: message"
};

// Thrown by the parse functions: what() holds every problem, one "FILE:LINE: path: message" per
// line (sorted by line); diagnostics() returns them.
class ConfigFileError : public ConfigError {
 public:
  explicit ConfigFileError(std::vector<ConfigDiagnostic> diagnostics);
  const std::vector<ConfigDiagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<ConfigDiagnostic> diagnostics_;
};

struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;  // 0 = dynamic loss scaling
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  bool auto_cast = false;
  bool fp16_master_weights_and_grads = false;
};

struct Bf16Config {
  bool enabled = false;
  bool check_grad_overflow = true;  // our default (DeepSpeed's code: false); see docs/config.md
  bool bf16_master_weights_and_grads = false;
  bool bf16_optimizer_states = false;
};

struct OptimizerConfig {
  std::string type;  // "" when absent (the program supplies one); else "Adam", "AdamW" or "SGD"
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
  bool adam_w_mode = true;  // resolved: AdamW always true; Adam follows the key (default true)
  bool amsgrad = false;
  // SGD (torch.optim.SGD)
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
};

// Parameters of every DeepSpeed schedule, flat; only those of `type` are read from the file.
struct SchedulerConfig {
  std::string type;  // "" when absent; "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle",
                     // "LRRangeTest"
  int64_t last_batch_iteration = -1;
  // WarmupLR / WarmupDecayLR / WarmupCosineLR
  double warmup_min_lr = 0.0;
  std::optional<double>
      warmup_max_lr;  // WarmupLR: absent = the optimizer's lr; WarmupDecayLR: 0.001
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // "log" | "linear"
  int64_t total_num_steps = 0;      // WarmupDecayLR, WarmupCosineLR: required (> 0)
  double warmup_min_ratio = 0.0;    // WarmupCosineLR
  double cos_min_ratio = 0.0001;    // WarmupCosineLR
  // OneCycle
  double cycle_min_lr = 0.0;  // required
  double cycle_max_lr = 0.0;  // required
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  std::optional<int64_t> cycle_second_step_size;  // absent: cycle_first_step_size
  int64_t cycle_first_stair_count = 0;
  std::optional<int64_t> cycle_second_stair_count;  // absent: cycle_first_stair_count
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
  // LRRangeTest
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

struct OffloadOptimizerConfig {
  std::string device = "none";  // "none" | "cpu" | "nvme"
  std::string nvme_path;
  int64_t buffer_count = 4;
  bool pin_memory = false;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;
  bool super_offload = false;
};

struct OffloadParamConfig {
  std::string device = "none";  // "none" | "cpu" | "nvme"
  std::string nvme_path;
  int64_t buffer_count = 5;
  int64_t buffer_size = 100000000;
  int64_t max_in_cpu = 1000000000;
  bool pin_memory = false;
};

struct ZeroOptimizationConfig {
  int stage = 0;
  bool overlap_comm = false;  // resolved: DeepSpeed's default is true at stage 3, false below
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  int64_t sub_group_size = 1000000000;
  // load_from_fp32_weights: false makes load_checkpoint rebuild the fp32 masters from the
  // 16-bit weights (the masters rounded to the job's 16-bit type), as DeepSpeed does; true loads
  // the checkpoint's masters. No effect in fp32.
  bool load_from_fp32_weights = true;
  // ignore_unused_parameters: false makes the first step after a backward in which a trainable
  // parameter got no gradient stop with an error naming it (DeepSpeed's check); true reduces its
  // gradient as zeros.
  bool ignore_unused_parameters = true;
  // host_shared_params (ours): stages 1-3 on ranks of one host (the shared-memory transport)
  // keep one copy of the parameters that the ranks share, each rank's optimizer writing its
  // shard in place: no parameter all-gathers (StageOptions::host_shared_params).
  bool host_shared_params = false;
  // What of this section keeps host_shared_params from acting ("at stage 0 (...)", "with MiCS
  // (...)"), or nullptr: the one list the config's warning and the engine's check share.
  const char* host_shared_params_excluded_by() const;
  OffloadOptimizerConfig offload_optimizer;
  OffloadParamConfig offload_param;
  // stage 3 (each also accepted without the stage3_ prefix, as DeepSpeed's aliases)
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  // stage3_gather_16bit_weights_on_model_save: false makes save_16bit_model at stage 3 save
  // nothing, as in DeepSpeed. Ours defaults to true (DeepSpeed's to false): a file without the
  // key gets the full weights.
  bool stage3_gather_16bit_weights_on_model_save = true;
  int64_t stage3_max_reuse_distance = 1000000000;
  // ZeRO++ and MiCS
  int zero_hpz_partition_size = 1;
  bool zero_quantized_weights = false;
  bool zero_quantized_nontrainable_weights = false;
  bool zero_quantized_gradients = false;
  int64_t mics_shard_size = -1;
  bool mics_hierarchical_params_gather = false;
};

struct CheckpointConfig {
  std::string tag_validation = "Warn";  // "Ignore" | "Warn" | "Fail"
  bool use_node_local_storage = false;
  // Ours (DeepSpeed has no such keys; its programs call save_checkpoint): the folder the engine
  // saves into every save_interval_steps optimizer steps (0: never by itself) and, when zerorun
  // restarts the job, resumes from ("": neither).
  std::string save_dir;
  int64_t save_interval_steps = 0;
};

struct MonitorConfig {  // csv_monitor and tensorboard
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};

struct CommsLoggerConfig {
  bool enabled = false;
  bool verbose = false;
  bool prof_all = true;
  bool debug = false;
  std::vector<std::string> prof_ops;
};

// DeepSpeed's flops_profiler: the forward of step profile_step, by operator and by module.
struct FlopsProfilerConfig {
  bool enabled = false;
  double recompute_fwd_factor = 0.0;  // extra forward share recomputed in backward (checkpointing)
  int64_t profile_step = 1;
  int64_t module_depth = -1;  // -1: every depth
  int64_t top_modules = 1;
  bool detailed = true;
  std::string output_file;  // "": stdout
};

struct AioConfig {
  int64_t block_size = 1048576;
  int64_t queue_depth = 8;
  int64_t intra_op_parallelism = 1;  // old name: thread_count
  bool single_submit = false;
  bool overlap_events = true;
};

struct DataTypesConfig {
  std::string grad_accum_dtype;  // "" = same as the parameters; else "fp32" | "fp16" | "bf16"
};

// DeepSpeed's activation_checkpointing: settings for the checkpoints the model makes
// (zero::Checkpointed, zero::checkpoint); the section turns nothing on by itself.
struct ActivationCheckpointingConfig {
  bool partition_activations = false;  // model parallelism only: no effect in pure data parallel
  bool contiguous_memory_optimization = false;   // needs partition_activations; not implemented
  bool cpu_checkpointing = false;                // saved inputs in (pinned) host memory
  int64_t number_checkpoints = 0;                // 0 = not given (DeepSpeed's None)
  bool synchronize_checkpoint_boundary = false;  // device synchronize around each checkpoint
  bool profile = false;                          // time the checkpointed forwards and recomputes
};

struct Config {
  int world_size = 1;  // the world size the config was resolved for
  // tensor_parallel.autotp_size (DeepSpeed's key; 0 and 1 mean none): the tensor-parallel degree
  // of zero::parallel_grid. The batch sizes are per data-parallel rank, as DeepSpeed's.
  int tensor_parallel_size = 1;
  // pipeline.stages (1: none), pipeline.schedule ("1f1b", "interleaved", "zb-h1") and
  // pipeline.virtual_stages (model chunks per rank, interleaved only): zero::parallel_grid's
  // pipeline size and zero::pipe's schedule. data_parallel_size = world_size / (tensor x
  // pipeline).
  int pipeline_parallel_size = 1;
  std::string pipeline_schedule = "1f1b";
  int pipeline_virtual_stages = 1;
  // DeepSpeed's pipeline.pipe_partitioned / grad_partitioned (on by default, as there): with
  // tensor parallelism, each tensor rank sends 1/tp of the activation (of its gradient) to the
  // next (previous) stage and the receiving stage's tensor group all-gathers it.
  bool pipe_partitioned = true;
  bool grad_partitioned = true;
  int data_parallel_size = 1;
  int64_t train_batch_size = 0;                // resolved: micro * accumulation * data ranks
  int64_t train_micro_batch_size_per_gpu = 0;  // resolved
  int64_t gradient_accumulation_steps = 0;     // resolved
  Fp16Config fp16;
  Bf16Config bf16;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  double gradient_clipping = 0.0;
  std::string communication_data_type;  // "" = same as the parameters; "fp32" | "fp16" | "bf16"
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  ZeroOptimizationConfig zero_optimization;
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  bool sparse_gradients = false;
  CheckpointConfig checkpoint;
  MonitorConfig csv_monitor;
  MonitorConfig tensorboard;
  CommsLoggerConfig comms_logger;
  FlopsProfilerConfig flops_profiler;
  AioConfig aio;
  DataTypesConfig data_types;
  ActivationCheckpointingConfig activation_checkpointing;
  // DeepSpeed's elasticity section; enabled, the batch sizes above are its solver's choice for
  // data_parallel_size, and these the data-parallel sizes that keep train_batch_size.
  ElasticityConfig elasticity;
  std::vector<int64_t> elastic_valid_data_parallel_sizes;

  // "fp16", "bf16" or "fp32": the compute precision the config selects.
  std::string precision() const;
};

struct ParsedConfig {
  Config config;
  std::vector<ConfigDiagnostic> warnings;
};

ParsedConfig parse_config_file(const std::string& path, const ConfigOptions& options = {});
ParsedConfig parse_config_string(const std::string& text, const ConfigOptions& options = {},
                                 const std::string& source_name = "<string>");
// The complete resolved config, every field, as JSON that parse_config_string accepts again.
std::string to_json_string(const Config& config, int indent = 2);

}  // namespace zero
