// Readers of the strictly validated ds_config sections: fp16, bf16 (and legacy bfloat16),
// zero_optimization with offload_optimizer/offload_param and deprecated forms, and monitors.
#include <cmath>

#include "config_detail.h"

namespace zero::detail {

namespace {

const std::vector<std::string> kFp16OnlyKeys = {
    "loss_scale", "initial_scale_power",          "loss_scale_window",
    "hysteresis", "consecutive_hysteresis",       "min_loss_scale",
    "auto_cast",  "fp16_master_weights_and_grads"};
const std::vector<std::string> kBf16OnlyKeys = {"immediate_grad_update", "check_grad_overflow",
                                                "bf16_master_weights_and_grads",
                                                "bf16_optimizer_states"};

void reject_foreign_keys(Section& s, const std::vector<std::string>& keys, const std::string& why) {
  for (const std::string& k : keys) {
    if (s.get(k)) s.ctx.error(s.child(k), why);
  }
}

void unsupported_if_true(Section& s, const std::string& key, bool value, const std::string& why) {
  if (value) s.ctx.error(s.child(key), "not supported: " + why);
}

}  // namespace

void read_precision(Section& root, Config& config) {
  Fp16Config& f = config.fp16;
  Section fp16(root.ctx, root.get("fp16"), "fp16", Unknown::kError);
  fp16.read("enabled", f.enabled);
  fp16.read("auto_cast", f.auto_cast);
  if (const nlohmann::json* v = fp16.get("loss_scale"); v && v->is_boolean()) {
    root.ctx.error("fp16.loss_scale",
                   "expected a number, got a boolean (0 = dynamic loss scaling)");
  } else {
    fp16.read("loss_scale", f.loss_scale, 0.0, HUGE_VAL);
  }
  fp16.read("initial_scale_power", f.initial_scale_power, 0, 127);
  fp16.read("loss_scale_window", f.loss_scale_window, 1, INT32_MAX);
  fp16.read("hysteresis", f.hysteresis, 1, INT32_MAX);
  fp16.read("consecutive_hysteresis", f.consecutive_hysteresis);
  if (fp16.read("min_loss_scale", f.min_loss_scale, 0.0, HUGE_VAL) && f.min_loss_scale <= 0) {
    root.ctx.error("fp16.min_loss_scale", "must be > 0");
  }
  fp16.read("fp16_master_weights_and_grads", f.fp16_master_weights_and_grads);
  unsupported_if_true(
      fp16, "fp16_master_weights_and_grads", f.fp16_master_weights_and_grads,
      "fp16 master weights change the optimizer math; this engine keeps fp32 master weights");
  reject_foreign_keys(fp16, kBf16OnlyKeys,
                      "a bf16 setting inside fp16; move it to the bf16 section");
  fp16.finish("fp16");

  // bf16, or its old name bfloat16 (DeepSpeed reads bfloat16 only when bf16 is absent).
  const nlohmann::json* bf16_json = root.get("bf16");
  const nlohmann::json* legacy = root.get("bfloat16");
  std::string bf16_path = "bf16";
  if (legacy && bf16_json) {
    root.ctx.error("bfloat16",
                   "both 'bf16' and its old name 'bfloat16' are given; keep only 'bf16'");
  } else if (legacy) {
    root.ctx.warn("bfloat16", "deprecated section name 'bfloat16': read as 'bf16'");
    bf16_json = legacy;
    bf16_path = "bfloat16";
  }
  Bf16Config& b = config.bf16;
  Section bf16(root.ctx, bf16_json, bf16_path, Unknown::kError);
  bf16.read("enabled", b.enabled);
  read_fixed(bf16, "immediate_grad_update", false, Otherwise::kNoEffect,
             "DeepSpeed's bf16 optimizer then adds each gradient into its fp32 accumulator from a "
             "hook during backward instead of after the backward; the sums are the same, and "
             "this engine accumulates at a point of its own");
  bf16.read("check_grad_overflow", b.check_grad_overflow);
  bf16.read("bf16_master_weights_and_grads", b.bf16_master_weights_and_grads);
  bf16.read("bf16_optimizer_states", b.bf16_optimizer_states);
  unsupported_if_true(
      bf16, "bf16_master_weights_and_grads", b.bf16_master_weights_and_grads,
      "bf16 master weights change the optimizer math; this engine keeps fp32 master weights");
  unsupported_if_true(bf16, "bf16_optimizer_states", b.bf16_optimizer_states,
                      "bf16 optimizer states change the optimizer math");
  reject_foreign_keys(
      bf16, kFp16OnlyKeys,
      "an fp16-only setting inside " + bf16_path + " (bf16 needs no loss scaling); remove it");
  bf16.finish(bf16_path);

  if (f.enabled && b.enabled) {
    root.ctx.error(
        bf16_path + ".enabled",
        "fp16 and bf16 are both enabled; enable at most one (DeepSpeed rejects this too)");
  }
}

namespace {

const std::vector<std::string> kDevices = {"none", "cpu", "nvme"};

void read_offload_optimizer(Section& zero, const nlohmann::json* json, OffloadOptimizerConfig& o) {
  Section s(zero.ctx, json, zero.child("offload_optimizer"), Unknown::kError);
  s.read_enum("device", o.device, kDevices, false);
  s.read("nvme_path", o.nvme_path);
  s.read("buffer_count", o.buffer_count, 0, INT64_MAX);
  s.read("pin_memory", o.pin_memory);
  s.read("pipeline_read", o.pipeline_read);
  s.read("pipeline_write", o.pipeline_write);
  s.read("fast_init", o.fast_init);
  s.read("ratio", o.ratio, 0.0, 1.0);
  s.read("super_offload", o.super_offload);
  read_fixed(s, "convert_grad_on_cpu", true, Otherwise::kNoEffect,
             "where the offloaded gradients are converted to fp32 is fixed by this engine's "
             "offload path; the values are the same");
  read_fixed(s, "cpuadam_cores_perc", 0.8, 0.0, 1.0,
             "it pins DeepSpeed's SuperOffload CPU Adam to a share of the cores; this engine "
             "sets no CPU affinity");
  s.finish(s.path());
}

void read_offload_param(Section& zero, const nlohmann::json* json, OffloadParamConfig& o) {
  Section s(zero.ctx, json, zero.child("offload_param"), Unknown::kError);
  s.read_enum("device", o.device, kDevices, false);
  s.read("nvme_path", o.nvme_path);
  s.read("buffer_count", o.buffer_count, 0, INT64_MAX);
  s.read("buffer_size", o.buffer_size, 0, INT64_MAX);
  s.read("max_in_cpu", o.max_in_cpu, 0, INT64_MAX);
  s.read("pin_memory", o.pin_memory);
  s.finish(s.path());
}

// The name given of a setting that has a stage3_-prefixed name and DeepSpeed's unprefixed alias
// ("" when neither); it joins `given`, the stage 3 keys reported as no effect below stage 3.
std::string stage3_name(Section& s, const char* prefixed, const char* alias,
                        std::vector<std::string>& given) {
  std::string name = s.pick({prefixed, alias});
  if (!name.empty()) given.push_back(name);
  return name;
}
// Reads of the names not given read nothing; they give each name its type in config_schema().
void type_absent(Section& s, std::initializer_list<const char*> names, const std::string& given,
                 bool) {
  bool unused = false;
  for (const char* n : names)
    if (given != n) s.read(n, unused);
}
void type_absent(Section& s, std::initializer_list<const char*> names, const std::string& given,
                 int64_t min) {
  int64_t unused = 0;
  for (const char* n : names)
    if (given != n) s.read(n, unused, min, INT64_MAX);
}
bool read_stage3(Section& s, const char* prefixed, const char* alias, int64_t& out,
                 std::vector<std::string>& given) {
  std::string name = stage3_name(s, prefixed, alias, given);
  type_absent(s, {prefixed, alias}, name, int64_t{0});
  return !name.empty() && s.read(name, out, 0, INT64_MAX);
}

// Stage 3 settings without effect here: read (range-checked) under whichever name is given; at
// stage 3 a value other than ours is reported (below stage 3 the stage warning covers it).
void stage3_fixed(Section& s, int stage, const char* prefixed, const char* alias, int64_t ours,
                  std::vector<std::string>& given, const std::string& why) {
  std::string name = stage3_name(s, prefixed, alias, given);
  type_absent(s, {prefixed, alias}, name, int64_t{0});
  int64_t v = ours;
  if (name.empty() || !s.read(name, v, 0, INT64_MAX)) return;
  if (stage == 3 && v != ours) s.ctx.warn(s.child(name), "no effect: " + why);
}
void stage3_fixed(Section& s, int stage, const char* prefixed, const char* alias, bool ours,
                  Otherwise otherwise, std::vector<std::string>& given, const std::string& why) {
  std::string name = stage3_name(s, prefixed, alias, given);
  type_absent(s, {prefixed, alias}, name, false);
  bool v = ours;
  if (name.empty() || !s.read(name, v) || stage != 3 || v == ours) return;
  if (otherwise == Otherwise::kRefuse)
    s.ctx.error(s.child(name), "not supported: " + why);
  else
    s.ctx.warn(s.child(name), "no effect: " + why);
}

}  // namespace

void read_zero(Section& root, ZeroOptimizationConfig& z) {
  Ctx& ctx = root.ctx;
  const nlohmann::json* json = root.get("zero_optimization");
  if (json && (json->is_boolean() || json->is_number_integer())) {
    // Deprecated forms: true/false (DeepSpeed: stage 1 / 0, allgather_size as bucket size), <int>.
    int64_t stage = json->is_boolean() ? (json->get<bool>() ? 1 : 0) : json->get<int64_t>();
    if (stage < 0 || stage > 3) {
      ctx.error("zero_optimization",
                "stage " + std::to_string(stage) + " does not exist (0, 1, 2 or 3)");
      return;
    }
    z.stage = static_cast<int>(stage);
    ctx.warn("zero_optimization", "deprecated form \"zero_optimization\": " + json->dump() +
                                      ": read as {\"stage\": " + std::to_string(stage) + "}");
    if (stage > 0) root.read("allgather_size", z.allgather_bucket_size, 0, INT64_MAX);
    z.overlap_comm = z.stage == 3;
    return;
  }
  Section s(ctx, json, "zero_optimization", Unknown::kError);
  s.read("stage", z.stage, 0, 3);
  bool overlap_given = s.read("overlap_comm", z.overlap_comm);
  if (!overlap_given) z.overlap_comm = z.stage == 3;
  read_fixed(s, "contiguous_gradients", true, Otherwise::kNoEffect,
             "gradients always live in contiguous flat buffers here (the layout is fixed); the "
             "reduced gradients are the same");
  read_fixed(s, "reduce_scatter", true, Otherwise::kNoEffect,
             "the collective is fixed by the stage (stages 0 and 1 all-reduce the flat gradients, "
             "stages 2 and 3 reduce-scatter them); the averaged gradients are the same");
  read_fixed(s, "allgather_partitions", true, Otherwise::kNoEffect,
             "the updated shards are always all-gathered (DeepSpeed's false broadcasts each shard "
             "instead); the parameters are the same");
  read_fixed(s, "round_robin_gradients", false, Otherwise::kNoEffect,
             "it only reorders DeepSpeed's copies of gradients to the host under CPU offload; the "
             "offloaded gradients are the same");
  read_fixed(s, "use_multi_rank_bucket_allreduce", true, Otherwise::kNoEffect,
             "it only batches the buckets of DeepSpeed's all-reduce path (reduce_scatter false); "
             "here the collective is fixed by the stage");
  s.read("reduce_bucket_size", z.reduce_bucket_size, 0, INT64_MAX);
  s.read("allgather_bucket_size", z.allgather_bucket_size, 0, INT64_MAX);
  s.read("sub_group_size", z.sub_group_size, 0, INT64_MAX);
  s.read("load_from_fp32_weights", z.load_from_fp32_weights);
  read_fixed(s, "elastic_checkpoint", false, Otherwise::kNoEffect,
             "it lets DeepSpeed's stage 1/2 checkpoints load at another data-parallel size; every "
             "checkpoint of this engine loads at any world size and stage");
  s.read("ignore_unused_parameters", z.ignore_unused_parameters);
  s.read("host_shared_params", z.host_shared_params);
  read_fixed(s, "legacy_stage1", false, Otherwise::kRefuse,
             "the ZeRO stage 1 implementation of DeepSpeed before 0.5.9 (current DeepSpeed "
             "raises an error for it too)");
  s.read("zero_hpz_partition_size", z.zero_hpz_partition_size, 0, INT32_MAX);
  s.read("zero_quantized_weights", z.zero_quantized_weights);
  s.read("zero_quantized_nontrainable_weights", z.zero_quantized_nontrainable_weights);
  s.read("zero_quantized_gradients", z.zero_quantized_gradients);
  s.read("mics_shard_size", z.mics_shard_size, -1, INT64_MAX);
  s.read("mics_hierarchical_params_gather", z.mics_hierarchical_params_gather);
  read_fixed(s, "memory_efficient_linear", true, Otherwise::kNoEffect,
             "it selects DeepSpeed's stage 3 replacement of Python linear layers; this engine "
             "replaces none of the model's modules, and the gradients are the same");
  read_fixed(s, "pipeline_loading_checkpoint", false, Otherwise::kNoEffect,
             "it loads stage 3 checkpoints into DeepSpeed's pipeline modules; pipeline "
             "parallelism is not implemented");
  read_fixed(s, "override_module_apply", true, Otherwise::kNoEffect,
             "it patches Python's nn.Module.apply under stage 3; LibTorch modules are not patched");
  read_fixed(s, "log_trace_cache_warnings", false, Otherwise::kNoEffect,
             "DeepSpeed's stage 3 trace-cache warnings do not exist here");
  read_fixed(s, "enable_sanity_checks", false, Otherwise::kNoEffect,
             "DeepSpeed's extra stage 3 debugging checks are not implemented");
  read_fixed(s, "save_muon_momentum_buffer_in_memory", false, Otherwise::kNoEffect,
             "the Muon optimizer is not implemented");

  std::vector<std::string> stage3_given;
  read_stage3(s, "stage3_prefetch_bucket_size", "prefetch_bucket_size",
              z.stage3_prefetch_bucket_size, stage3_given);
  read_stage3(s, "stage3_param_persistence_threshold", "param_persistence_threshold",
              z.stage3_param_persistence_threshold, stage3_given);
  stage3_fixed(s, z.stage, "stage3_model_persistence_threshold", "model_persistence_threshold",
               INT64_MAX, stage3_given,
               "the total size of the persistent parameters is not capped; "
               "stage3_param_persistence_threshold alone decides which parameters stay gathered");
  read_stage3(s, "stage3_max_live_parameters", "max_live_parameters", z.stage3_max_live_parameters,
              stage3_given);
  read_stage3(s, "stage3_max_reuse_distance", "max_reuse_distance", z.stage3_max_reuse_distance,
              stage3_given);
  stage3_fixed(s, z.stage, "stage3_module_granularity_threshold", "module_granularity_threshold", 0,
               stage3_given,
               "it groups DeepSpeed's small modules into leaf modules for fetching; this engine "
               "fetches by zero::Sharded block");
  stage3_fixed(s, z.stage, "stage3_partition_stream_chunk_size", "partition_stream_chunk_size", 0,
               stage3_given,
               "it streams DeepSpeed's zero.Init partitioning in chunks to save memory; the "
               "partitions are the same");
  stage3_fixed(s, z.stage, "stage3_use_all_reduce_for_fetch_params",
               "use_all_reduce_for_fetch_params", false, Otherwise::kNoEffect, stage3_given,
               "parameters are always fetched with all-gather (DeepSpeed's all-reduce variant "
               "gathers the same values)");
  stage3_fixed(s, z.stage, "stage3_allgather_sequential", "allgather_sequential", false,
               Otherwise::kNoEffect, stage3_given,
               "it serializes DeepSpeed's parameter all-gathers; the gathered parameters are the "
               "same");
  // DeepSpeed's default is false; ours is true (a file without the key gets the full weights).
  std::string gather = stage3_name(s, "stage3_gather_16bit_weights_on_model_save",
                                   "gather_16bit_weights_on_model_save", stage3_given);
  type_absent(s,
              {"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save"},
              gather, false);
  if (!s.get("stage3_gather_fp16_weights_on_model_save"))
    type_absent(s, {"stage3_gather_fp16_weights_on_model_save"}, "", false);
  bool gather_16bit = true;
  if (!gather.empty()) s.read(gather, gather_16bit);
  if (s.get("stage3_gather_fp16_weights_on_model_save")) {
    const std::string old = "stage3_gather_fp16_weights_on_model_save";
    if (!gather.empty()) {
      ctx.error(s.child(old), "deprecated '" + old + "' and its replacement '" + gather +
                                  "' are both given; keep '" + gather + "'");
    } else if (s.read(old, gather_16bit)) {
      stage3_given.push_back(old);
      ctx.warn(s.child(old), "deprecated: read as stage3_gather_16bit_weights_on_model_save");
    }
  }
  z.stage3_gather_16bit_weights_on_model_save = gather_16bit;

  // Offload sections and their deprecated boolean forms.
  const nlohmann::json* oo = s.get("offload_optimizer");
  const nlohmann::json* op = s.get("offload_param");
  read_offload_optimizer(s, oo, z.offload_optimizer);
  read_offload_param(s, op, z.offload_param);
  bool flag = false;
  if (s.read("cpu_offload", flag)) {
    if (oo) {
      ctx.error(s.child("cpu_offload"),
                "deprecated 'cpu_offload' and its replacement 'offload_optimizer' are both "
                "given; keep 'offload_optimizer'");
    } else {
      ctx.warn(s.child("cpu_offload"),
               std::string("deprecated: read as offload_optimizer.device = \"") +
                   (flag ? "cpu" : "none") + "\"");
      if (flag) z.offload_optimizer.device = "cpu";
    }
  }
  if (s.read("cpu_offload_param", flag)) {
    if (op) {
      ctx.error(s.child("cpu_offload_param"),
                "deprecated 'cpu_offload_param' and its replacement 'offload_param' "
                "are both given; keep 'offload_param'");
    } else {
      ctx.warn(s.child("cpu_offload_param"),
               std::string("deprecated: read as offload_param.device = \"") +
                   (flag ? "cpu" : "none") + "\"");
      if (flag) z.offload_param.device = "cpu";
    }
  }
  if (s.read("cpu_offload_use_pin_memory", flag)) {
    ctx.warn(s.child("cpu_offload_use_pin_memory"),
             "deprecated: read as pin_memory of the offload sections enabled by cpu_offload / "
             "cpu_offload_param");
    if (!oo) z.offload_optimizer.pin_memory = flag;
    if (!op) z.offload_param.pin_memory = flag;
  }

  // Features that would change the math, and settings without effect here.
  if (s.get("zenflow"))
    ctx.error(s.child("zenflow"), "not supported: ZenFlow changes which gradients update when");
  if (s.get("zeropp_loco_param")) {
    ctx.error(s.child("zeropp_loco_param"),
              "not supported: LoCo ZeRO++ error feedback changes the math");
  }
  if (s.get("leaf_module"))
    ctx.warn(s.child("leaf_module"), "ignored: stage 3 leaf modules are not implemented");
  if (z.zero_quantized_weights && z.stage != 3) {
    ctx.warn(s.child("zero_quantized_weights"),
             "no effect at stage " + std::to_string(z.stage) +
                 ": qwZ quantizes the all-gathers of stage 3's partitioned parameters");
  }
  if (z.zero_quantized_nontrainable_weights) {
    ctx.warn(s.child("zero_quantized_nontrainable_weights"),
             "no effect: frozen parameters are not partitioned here (every rank keeps them "
             "whole), so none is gathered");
  }
  if (z.zero_quantized_gradients && z.stage != 3) {
    ctx.warn(s.child("zero_quantized_gradients"),
             "no effect at stage " + std::to_string(z.stage) +
                 ": qgZ quantizes the reduce-scatters of stage 3's gradients");
  }
  if (z.zero_hpz_partition_size > 1 && z.stage != 3) {
    ctx.warn(s.child("zero_hpz_partition_size"),
             "no effect at stage " + std::to_string(z.stage) +
                 ": hpZ keeps a secondary copy of the partitioned parameters of stage 3");
  }
  if (z.host_shared_params)
    if (const char* without = z.host_shared_params_excluded_by())
      ctx.warn(s.child("host_shared_params"), std::string("no effect ") + without);
  if (z.mics_shard_size > 0 && z.stage != 3) {
    ctx.warn(s.child("mics_shard_size"),
             "no effect at stage " + std::to_string(z.stage) +
                 ": MiCS shards stage 3's parameters within groups of ranks");
  }
  if (z.mics_hierarchical_params_gather && (z.stage != 3 || z.mics_shard_size <= 0)) {
    ctx.warn(s.child("mics_hierarchical_params_gather"),
             z.stage != 3 ? "no effect at stage " + std::to_string(z.stage) +
                                ": it gathers MiCS's stage 3 parameters"
                          : std::string("no effect without mics_shard_size > 0"));
  }
  if (z.stage == 3 && z.mics_shard_size > 0 && z.zero_hpz_partition_size > 1) {
    ctx.error(s.child("zero_hpz_partition_size"),
              "hpZ with MiCS (mics_shard_size " + std::to_string(z.mics_shard_size) +
                  "): MiCS already keeps every gather within its shard group; use one of them");
  }
  if (z.offload_optimizer.ratio < 1.0 && z.stage != 3) {
    ctx.error(s.child("offload_optimizer.ratio"),
              "partial offloading (ratio < 1) needs ZeRO stage 3 (DeepSpeed "
              "rejects it at stage " +
                  std::to_string(z.stage) + ")");
  }
  if (z.stage == 0 && z.offload_optimizer.device != "none") {
    ctx.warn(s.child(oo ? "offload_optimizer" : "cpu_offload"),
             "no effect at stage 0: optimizer offload needs ZeRO stage 1 or higher");
  }
  if (z.stage < 3) {
    if (z.offload_param.device != "none") {
      ctx.warn(s.child(op ? "offload_param" : "cpu_offload_param"),
               "no effect at stage " + std::to_string(z.stage) +
                   ": parameter offload needs ZeRO stage 3");
    }
    for (const std::string& key : stage3_given) {
      ctx.warn(s.child(key),
               "no effect at stage " + std::to_string(z.stage) + ": a stage 3 setting");
    }
  }
  s.finish("zero_optimization");
}

void read_monitors(Section& root, Config& config) {
  for (const char* name : {"csv_monitor", "tensorboard"}) {
    MonitorConfig& m = std::string(name) == "csv_monitor" ? config.csv_monitor : config.tensorboard;
    Section s(root.ctx, root.get(name), name, Unknown::kError);
    s.read("enabled", m.enabled);
    s.read("output_path", m.output_path);
    s.read("job_name", m.job_name);
    s.finish(name);
  }
  {
    CommsLoggerConfig& c = config.comms_logger;
    Section s(root.ctx, root.get("comms_logger"), "comms_logger", Unknown::kError);
    s.read("enabled", c.enabled);
    s.read("verbose", c.verbose);
    s.read("prof_all", c.prof_all);
    s.read("debug", c.debug);
    if (const nlohmann::json* ops = s.get("prof_ops")) {
      if (!ops->is_array()) {
        root.ctx.error("comms_logger.prof_ops",
                       "expected an array of operation names, got " + type_name(*ops));
      } else {
        for (const auto& op : *ops) {
          if (op.is_string())
            c.prof_ops.push_back(op.get<std::string>());
          else
            root.ctx.error("comms_logger.prof_ops",
                           "expected operation names (strings), got " + type_name(op));
        }
      }
    }
    s.finish("comms_logger");
  }
  {
    FlopsProfilerConfig& f = config.flops_profiler;
    Section s(root.ctx, root.get("flops_profiler"), "flops_profiler", Unknown::kError);
    s.read("enabled", f.enabled);
    s.read("recompute_fwd_factor", f.recompute_fwd_factor, 0.0, 1e9);
    s.read("profile_step", f.profile_step, 0, INT64_MAX);
    s.read("module_depth", f.module_depth, -1, INT64_MAX);
    s.read("top_modules", f.top_modules, 1, INT64_MAX);
    s.read("detailed", f.detailed);
    s.read("output_file", f.output_file);
    s.finish("flops_profiler");
  }
  {
    CheckpointConfig& c = config.checkpoint;
    Section s(root.ctx, root.get("checkpoint"), "checkpoint", Unknown::kWarn);
    s.read_enum("tag_validation", c.tag_validation, {"Ignore", "Warn", "Fail"}, true);
    read_fixed(s, "load_universal", false, Otherwise::kNoEffect,
               "every checkpoint of this engine loads at any world size and stage (DeepSpeed "
               "needs its universal format for that)");
    s.read("use_node_local_storage", c.use_node_local_storage);
    s.read("save_dir", c.save_dir);
    s.read("save_interval_steps", c.save_interval_steps, 0, INT64_MAX);
    if (c.save_interval_steps > 0 && c.save_dir.empty())
      root.ctx.error("checkpoint.save_interval_steps",
                     "saving every " + std::to_string(c.save_interval_steps) +
                         " steps needs checkpoint.save_dir, the folder to save into");
    Section pw(root.ctx, s.get("parallel_write"), "checkpoint.parallel_write", Unknown::kWarn);
    read_fixed(pw, "pipeline_stage", false, Otherwise::kNoEffect,
               "it spreads DeepSpeed's checkpoint writes over pipeline stages; pipeline "
               "parallelism is not implemented");
    pw.finish("checkpoint.parallel_write");
    s.finish("checkpoint");
  }
  {
    AioConfig& a = config.aio;
    Section s(root.ctx, root.get("aio"), "aio", Unknown::kWarn);
    s.read("block_size", a.block_size, 1, INT64_MAX);
    s.read("queue_depth", a.queue_depth, 1, INT64_MAX);
    std::string threads = s.pick({"intra_op_parallelism", "thread_count"});
    type_absent(s, {"intra_op_parallelism", "thread_count"}, threads, int64_t{1});
    if (!threads.empty()) {
      s.read(threads, a.intra_op_parallelism, 1, INT64_MAX);
      if (threads == "thread_count")
        root.ctx.warn("aio.thread_count", "deprecated: read as intra_op_parallelism");
    }
    s.read("single_submit", a.single_submit);
    s.read("overlap_events", a.overlap_events);
    read_fixed(s, "use_gds", false, Otherwise::kNoEffect,
               "GPUDirect Storage is not used; NVMe offload moves data between the files and "
               "pinned host memory with io_uring");
    s.finish("aio");
  }
  {
    Section s(root.ctx, root.get("data_types"), "data_types", Unknown::kWarn);
    s.read_enum("grad_accum_dtype", config.data_types.grad_accum_dtype, {"fp32", "fp16", "bf16"},
                true);
    s.finish("data_types");
  }
}

// DeepSpeed's pydantic model forbids unknown keys; its configure() asserts that contiguous
// buffers come with partitioned activations.
void read_activation_checkpointing(Section& root, ActivationCheckpointingConfig& a,
                                   int tensor_parallel_size) {
  const std::string name = "activation_checkpointing";
  Section s(root.ctx, root.get(name), name, Unknown::kError);
  s.read("partition_activations", a.partition_activations);
  s.read("contiguous_memory_optimization", a.contiguous_memory_optimization);
  s.read("cpu_checkpointing", a.cpu_checkpointing);
  s.read("number_checkpoints", a.number_checkpoints, 1, INT64_MAX);
  s.read("synchronize_checkpoint_boundary", a.synchronize_checkpoint_boundary);
  s.read("profile", a.profile);
  s.finish(name);
  if (a.partition_activations && tensor_parallel_size == 1)
    root.ctx.warn(s.child("partition_activations"),
                  "no effect: it splits a checkpointed input across model-parallel ranks, "
                  "where the input is replicated; with data parallelism only, each rank's "
                  "inputs are its own micro-batch's and stay whole (DeepSpeed keeps them "
                  "whole too)");
  if (a.contiguous_memory_optimization && !a.partition_activations)
    root.ctx.error(s.child("contiguous_memory_optimization"),
                   "needs partition_activations: true (DeepSpeed asserts it when the model "
                   "configures checkpointing)");
  else if (a.contiguous_memory_optimization)
    root.ctx.warn(s.child("contiguous_memory_optimization"),
                  "ignored: copying checkpoints into preallocated contiguous buffers is not "
                  "implemented (each checkpoint keeps its own tensor; the values are the same)");
  if (a.number_checkpoints > 0 && !a.contiguous_memory_optimization)
    root.ctx.warn(s.child("number_checkpoints"),
                  "no effect: it sizes the buffers of contiguous_memory_optimization");
}

}  // namespace zero::detail
