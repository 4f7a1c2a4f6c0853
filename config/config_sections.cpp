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
  bf16.read("immediate_grad_update", b.immediate_grad_update);
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
  s.read("convert_grad_on_cpu", o.convert_grad_on_cpu);
  s.read("cpuadam_cores_perc", o.cpuadam_cores_perc, 0.0, 1.0);
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

// Reads an int64 setting that has a stage3_-prefixed name and DeepSpeed's unprefixed alias.
bool read_stage3(Section& s, const char* prefixed, const char* alias, int64_t& out,
                 std::vector<std::string>& given) {
  std::string name = s.pick({prefixed, alias});
  if (name.empty()) return false;
  given.push_back(name);
  return s.read(name, out, 0, INT64_MAX);
}
bool read_stage3(Section& s, const char* prefixed, const char* alias, bool& out,
                 std::vector<std::string>& given) {
  std::string name = s.pick({prefixed, alias});
  if (name.empty()) return false;
  given.push_back(name);
  return s.read(name, out);
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
  s.read("contiguous_gradients", z.contiguous_gradients);
  s.read("reduce_scatter", z.reduce_scatter);
  s.read("allgather_partitions", z.allgather_partitions);
  s.read("round_robin_gradients", z.round_robin_gradients);
  s.read("use_multi_rank_bucket_allreduce", z.use_multi_rank_bucket_allreduce);
  s.read("reduce_bucket_size", z.reduce_bucket_size, 0, INT64_MAX);
  s.read("allgather_bucket_size", z.allgather_bucket_size, 0, INT64_MAX);
  s.read("sub_group_size", z.sub_group_size, 0, INT64_MAX);
  s.read("load_from_fp32_weights", z.load_from_fp32_weights);
  s.read("elastic_checkpoint", z.elastic_checkpoint);
  s.read("ignore_unused_parameters", z.ignore_unused_parameters);
  s.read("legacy_stage1", z.legacy_stage1);
  s.read("zero_hpz_partition_size", z.zero_hpz_partition_size, 0, INT32_MAX);
  s.read("zero_quantized_weights", z.zero_quantized_weights);
  s.read("zero_quantized_nontrainable_weights", z.zero_quantized_nontrainable_weights);
  s.read("zero_quantized_gradients", z.zero_quantized_gradients);
  s.read("mics_shard_size", z.mics_shard_size, -1, INT64_MAX);
  s.read("mics_hierarchical_params_gather", z.mics_hierarchical_params_gather);
  s.read("memory_efficient_linear", z.memory_efficient_linear);
  s.read("pipeline_loading_checkpoint", z.pipeline_loading_checkpoint);
  s.read("override_module_apply", z.override_module_apply);
  s.read("log_trace_cache_warnings", z.log_trace_cache_warnings);
  s.read("enable_sanity_checks", z.enable_sanity_checks);
  bool muon_buffer = false;
  s.read("save_muon_momentum_buffer_in_memory", muon_buffer);

  std::vector<std::string> stage3_given;
  read_stage3(s, "stage3_prefetch_bucket_size", "prefetch_bucket_size",
              z.stage3_prefetch_bucket_size, stage3_given);
  read_stage3(s, "stage3_param_persistence_threshold", "param_persistence_threshold",
              z.stage3_param_persistence_threshold, stage3_given);
  read_stage3(s, "stage3_model_persistence_threshold", "model_persistence_threshold",
              z.stage3_model_persistence_threshold, stage3_given);
  read_stage3(s, "stage3_max_live_parameters", "max_live_parameters", z.stage3_max_live_parameters,
              stage3_given);
  read_stage3(s, "stage3_max_reuse_distance", "max_reuse_distance", z.stage3_max_reuse_distance,
              stage3_given);
  read_stage3(s, "stage3_module_granularity_threshold", "module_granularity_threshold",
              z.stage3_module_granularity_threshold, stage3_given);
  read_stage3(s, "stage3_partition_stream_chunk_size", "partition_stream_chunk_size",
              z.stage3_partition_stream_chunk_size, stage3_given);
  read_stage3(s, "stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params",
              z.stage3_use_all_reduce_for_fetch_params, stage3_given);
  read_stage3(s, "stage3_allgather_sequential", "allgather_sequential",
              z.stage3_allgather_sequential, stage3_given);
  std::string gather =
      s.pick({"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save"});
  if (!gather.empty()) {
    stage3_given.push_back(gather);
    s.read(gather, z.stage3_gather_16bit_weights_on_model_save);
  }
  if (s.get("stage3_gather_fp16_weights_on_model_save")) {
    const std::string old = "stage3_gather_fp16_weights_on_model_save";
    if (!gather.empty()) {
      ctx.error(s.child(old), "deprecated '" + old + "' and its replacement '" + gather +
                                  "' are both given; keep '" + gather + "'");
    } else if (s.read(old, z.stage3_gather_16bit_weights_on_model_save)) {
      stage3_given.push_back(old);
      ctx.warn(s.child(old), "deprecated: read as stage3_gather_16bit_weights_on_model_save");
    }
  }

  // Offload sections and their deprecated boolean forms.
  const nlohmann::json* oo = s.get("offload_optimizer");
  const nlohmann::json* op = s.get("offload_param");
  read_offload_optimizer(s, oo, z.offload_optimizer);
  read_offload_param(s, op, z.offload_param);
  bool flag = false;
  if (s.get("cpu_offload") && s.read("cpu_offload", flag)) {
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
  if (s.get("cpu_offload_param") && s.read("cpu_offload_param", flag)) {
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
  if (s.get("cpu_offload_use_pin_memory") && s.read("cpu_offload_use_pin_memory", flag)) {
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
  unsupported_if_true(s, "zero_quantized_weights", z.zero_quantized_weights,
                      "ZeRO++ quantized weight communication changes the math");
  unsupported_if_true(s, "zero_quantized_nontrainable_weights",
                      z.zero_quantized_nontrainable_weights,
                      "ZeRO++ quantized weights change the math");
  unsupported_if_true(s, "zero_quantized_gradients", z.zero_quantized_gradients,
                      "ZeRO++ quantized gradient communication changes the math");
  if (z.zero_hpz_partition_size > 1) {
    ctx.warn(s.child("zero_hpz_partition_size"),
             "ignored: hierarchical (hpZ) partitioning is not implemented; "
             "parameters are partitioned over all ranks");
  }
  if (z.mics_shard_size > 0) {
    ctx.warn(s.child("mics_shard_size"),
             "ignored: MiCS sharding is not implemented; ZeRO shards over all ranks");
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
    s.read("load_universal", c.load_universal);
    s.read("use_node_local_storage", c.use_node_local_storage);
    Section pw(root.ctx, s.get("parallel_write"), "checkpoint.parallel_write", Unknown::kWarn);
    pw.read("pipeline_stage", c.parallel_write_pipeline_stage);
    pw.finish("checkpoint.parallel_write");
    s.finish("checkpoint");
  }
  {
    AioConfig& a = config.aio;
    Section s(root.ctx, root.get("aio"), "aio", Unknown::kWarn);
    s.read("block_size", a.block_size, 1, INT64_MAX);
    s.read("queue_depth", a.queue_depth, 1, INT64_MAX);
    std::string threads = s.pick({"intra_op_parallelism", "thread_count"});
    if (!threads.empty()) {
      s.read(threads, a.intra_op_parallelism, 1, INT64_MAX);
      if (threads == "thread_count")
        root.ctx.warn("aio.thread_count", "deprecated: read as intra_op_parallelism");
    }
    s.read("single_submit", a.single_submit);
    s.read("overlap_events", a.overlap_events);
    s.read("use_gds", a.use_gds);
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
void read_activation_checkpointing(Section& root, ActivationCheckpointingConfig& a) {
  const std::string name = "activation_checkpointing";
  Section s(root.ctx, root.get(name), name, Unknown::kError);
  s.read("partition_activations", a.partition_activations);
  s.read("contiguous_memory_optimization", a.contiguous_memory_optimization);
  s.read("cpu_checkpointing", a.cpu_checkpointing);
  s.read("number_checkpoints", a.number_checkpoints, 1, INT64_MAX);
  s.read("synchronize_checkpoint_boundary", a.synchronize_checkpoint_boundary);
  s.read("profile", a.profile);
  s.finish(name);
  if (a.partition_activations)
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
