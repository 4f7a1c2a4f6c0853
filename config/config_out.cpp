// to_json_string: the resolved Config as a complete ds_config (every field, defaults filled, in
// DeepSpeed's key names) that parse_config_string reads back into the same Config.
#include <nlohmann/json.hpp>

#include <zero/config/config.h>

namespace zero {

namespace {

using Json = nlohmann::ordered_json;

Json or_null(const std::string& s) {
  return s.empty() ? Json(nullptr) : Json(s);
}

Json optimizer_json(const OptimizerConfig& o) {
  if (o.type.empty()) return nullptr;
  Json params;
  params["lr"] = o.lr;
  params["weight_decay"] = o.weight_decay;
  if (o.type == "SGD") {
    params["momentum"] = o.momentum;
    params["dampening"] = o.dampening;
    params["nesterov"] = o.nesterov;
  } else {
    params["betas"] = {o.betas[0], o.betas[1]};
    params["eps"] = o.eps;
    params["bias_correction"] = o.bias_correction;
    params["adam_w_mode"] = o.adam_w_mode;
    params["amsgrad"] = o.amsgrad;
  }
  Json out;
  out["type"] = o.type;
  out["params"] = params;
  return out;
}

Json scheduler_json(const SchedulerConfig& s) {
  if (s.type.empty()) return nullptr;
  Json p;
  if (s.type == "WarmupLR" || s.type == "WarmupDecayLR") {
    p["warmup_min_lr"] = s.warmup_min_lr;
    p["warmup_max_lr"] = s.warmup_max_lr ? Json(*s.warmup_max_lr) : Json(nullptr);
    p["warmup_num_steps"] = s.warmup_num_steps;
    p["warmup_type"] = s.warmup_type;
    if (s.type == "WarmupDecayLR") p["total_num_steps"] = s.total_num_steps;
  } else if (s.type == "WarmupCosineLR") {
    p["total_num_steps"] = s.total_num_steps;
    p["warmup_min_ratio"] = s.warmup_min_ratio;
    p["warmup_num_steps"] = s.warmup_num_steps;
    p["cos_min_ratio"] = s.cos_min_ratio;
    p["warmup_type"] = s.warmup_type;
  } else if (s.type == "OneCycle") {
    p["cycle_min_lr"] = s.cycle_min_lr;
    p["cycle_max_lr"] = s.cycle_max_lr;
    p["decay_lr_rate"] = s.decay_lr_rate;
    p["cycle_first_step_size"] = s.cycle_first_step_size;
    p["cycle_second_step_size"] =
        s.cycle_second_step_size ? Json(*s.cycle_second_step_size) : Json(nullptr);
    p["cycle_first_stair_count"] = s.cycle_first_stair_count;
    p["cycle_second_stair_count"] =
        s.cycle_second_stair_count ? Json(*s.cycle_second_stair_count) : Json(nullptr);
    p["decay_step_size"] = s.decay_step_size;
    p["cycle_momentum"] = s.cycle_momentum;
    p["cycle_min_mom"] = s.cycle_min_mom;
    p["cycle_max_mom"] = s.cycle_max_mom;
    p["decay_mom_rate"] = s.decay_mom_rate;
  } else {
    p["lr_range_test_min_lr"] = s.lr_range_test_min_lr;
    p["lr_range_test_step_size"] = s.lr_range_test_step_size;
    p["lr_range_test_step_rate"] = s.lr_range_test_step_rate;
    p["lr_range_test_staircase"] = s.lr_range_test_staircase;
  }
  p["last_batch_iteration"] = s.last_batch_iteration;
  Json out;
  out["type"] = s.type;
  out["params"] = p;
  return out;
}

Json zero_json(const ZeroOptimizationConfig& z) {
  Json oo;
  oo["device"] = z.offload_optimizer.device;
  oo["nvme_path"] = or_null(z.offload_optimizer.nvme_path);
  oo["buffer_count"] = z.offload_optimizer.buffer_count;
  oo["pin_memory"] = z.offload_optimizer.pin_memory;
  oo["pipeline_read"] = z.offload_optimizer.pipeline_read;
  oo["pipeline_write"] = z.offload_optimizer.pipeline_write;
  oo["fast_init"] = z.offload_optimizer.fast_init;
  oo["ratio"] = z.offload_optimizer.ratio;
  oo["super_offload"] = z.offload_optimizer.super_offload;
  Json op;
  op["device"] = z.offload_param.device;
  op["nvme_path"] = or_null(z.offload_param.nvme_path);
  op["buffer_count"] = z.offload_param.buffer_count;
  op["buffer_size"] = z.offload_param.buffer_size;
  op["max_in_cpu"] = z.offload_param.max_in_cpu;
  op["pin_memory"] = z.offload_param.pin_memory;
  Json out;
  out["stage"] = z.stage;
  out["overlap_comm"] = z.overlap_comm;
  out["reduce_bucket_size"] = z.reduce_bucket_size;
  out["allgather_bucket_size"] = z.allgather_bucket_size;
  out["sub_group_size"] = z.sub_group_size;
  out["load_from_fp32_weights"] = z.load_from_fp32_weights;
  out["ignore_unused_parameters"] = z.ignore_unused_parameters;
  if (z.host_shared_params) out["host_shared_params"] = true;  // ours: only when set
  out["offload_optimizer"] = oo;
  out["offload_param"] = op;
  out["stage3_prefetch_bucket_size"] = z.stage3_prefetch_bucket_size;
  out["stage3_param_persistence_threshold"] = z.stage3_param_persistence_threshold;
  out["stage3_max_live_parameters"] = z.stage3_max_live_parameters;
  out["stage3_gather_16bit_weights_on_model_save"] = z.stage3_gather_16bit_weights_on_model_save;
  out["stage3_max_reuse_distance"] = z.stage3_max_reuse_distance;
  out["zero_hpz_partition_size"] = z.zero_hpz_partition_size;
  out["zero_quantized_weights"] = z.zero_quantized_weights;
  out["zero_quantized_nontrainable_weights"] = z.zero_quantized_nontrainable_weights;
  out["zero_quantized_gradients"] = z.zero_quantized_gradients;
  out["mics_shard_size"] = z.mics_shard_size;
  out["mics_hierarchical_params_gather"] = z.mics_hierarchical_params_gather;
  return out;
}

Json monitor_json(const MonitorConfig& m) {
  Json out;
  out["enabled"] = m.enabled;
  out["output_path"] = m.output_path;
  out["job_name"] = m.job_name;
  return out;
}

}  // namespace

std::string to_json_string(const Config& c, int indent) {
  Json j;
  j["tensor_parallel"] = {{"autotp_size", c.tensor_parallel_size}};
  j["pipeline"] = {{"stages", c.pipeline_parallel_size},
                   {"schedule", c.pipeline_schedule},
                   {"virtual_stages", c.pipeline_virtual_stages}};
  j["train_batch_size"] = c.train_batch_size;
  j["train_micro_batch_size_per_gpu"] = c.train_micro_batch_size_per_gpu;
  j["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  Json fp16;
  fp16["enabled"] = c.fp16.enabled;
  fp16["auto_cast"] = c.fp16.auto_cast;
  fp16["loss_scale"] = c.fp16.loss_scale;
  fp16["initial_scale_power"] = c.fp16.initial_scale_power;
  fp16["loss_scale_window"] = c.fp16.loss_scale_window;
  fp16["hysteresis"] = c.fp16.hysteresis;
  fp16["consecutive_hysteresis"] = c.fp16.consecutive_hysteresis;
  fp16["min_loss_scale"] = c.fp16.min_loss_scale;
  fp16["fp16_master_weights_and_grads"] = c.fp16.fp16_master_weights_and_grads;
  j["fp16"] = fp16;
  Json bf16;
  bf16["enabled"] = c.bf16.enabled;
  bf16["check_grad_overflow"] = c.bf16.check_grad_overflow;
  bf16["bf16_master_weights_and_grads"] = c.bf16.bf16_master_weights_and_grads;
  bf16["bf16_optimizer_states"] = c.bf16.bf16_optimizer_states;
  j["bf16"] = bf16;
  j["optimizer"] = optimizer_json(c.optimizer);
  j["scheduler"] = scheduler_json(c.scheduler);
  j["gradient_clipping"] = c.gradient_clipping;
  j["communication_data_type"] = or_null(c.communication_data_type);
  j["prescale_gradients"] = c.prescale_gradients;
  j["gradient_predivide_factor"] = c.gradient_predivide_factor;
  j["zero_optimization"] = zero_json(c.zero_optimization);
  j["steps_per_print"] = c.steps_per_print;
  j["wall_clock_breakdown"] = c.wall_clock_breakdown;
  j["sparse_gradients"] = c.sparse_gradients;
  Json ckpt;
  ckpt["tag_validation"] = c.checkpoint.tag_validation;
  ckpt["use_node_local_storage"] = c.checkpoint.use_node_local_storage;
  if (!c.checkpoint.save_dir.empty()) ckpt["save_dir"] = c.checkpoint.save_dir;
  ckpt["save_interval_steps"] = c.checkpoint.save_interval_steps;
  j["checkpoint"] = ckpt;
  j["csv_monitor"] = monitor_json(c.csv_monitor);
  j["tensorboard"] = monitor_json(c.tensorboard);
  Json comms;
  comms["enabled"] = c.comms_logger.enabled;
  comms["verbose"] = c.comms_logger.verbose;
  comms["prof_all"] = c.comms_logger.prof_all;
  comms["debug"] = c.comms_logger.debug;
  comms["prof_ops"] = c.comms_logger.prof_ops;
  j["comms_logger"] = comms;
  const FlopsProfilerConfig& f = c.flops_profiler;
  j["flops_profiler"] = Json{{"enabled", f.enabled},
                             {"recompute_fwd_factor", f.recompute_fwd_factor},
                             {"profile_step", f.profile_step},
                             {"module_depth", f.module_depth},
                             {"top_modules", f.top_modules},
                             {"detailed", f.detailed},
                             {"output_file", or_null(f.output_file)}};
  Json aio;
  aio["block_size"] = c.aio.block_size;
  aio["queue_depth"] = c.aio.queue_depth;
  aio["intra_op_parallelism"] = c.aio.intra_op_parallelism;
  aio["single_submit"] = c.aio.single_submit;
  aio["overlap_events"] = c.aio.overlap_events;
  j["aio"] = aio;
  const ActivationCheckpointingConfig& ac = c.activation_checkpointing;
  Json act;
  act["partition_activations"] = ac.partition_activations;
  act["contiguous_memory_optimization"] = ac.contiguous_memory_optimization;
  act["cpu_checkpointing"] = ac.cpu_checkpointing;
  if (ac.number_checkpoints > 0) act["number_checkpoints"] = ac.number_checkpoints;
  act["synchronize_checkpoint_boundary"] = ac.synchronize_checkpoint_boundary;
  act["profile"] = ac.profile;
  j["activation_checkpointing"] = act;
  j["data_types"] = Json{{"grad_accum_dtype", or_null(c.data_types.grad_accum_dtype)}};
  if (c.elasticity.enabled) {
    const ElasticityConfig& e = c.elasticity;
    j["elasticity"] = Json{{"enabled", true},
                           {"max_train_batch_size", e.max_train_batch_size},
                           {"micro_batch_sizes", e.micro_batch_sizes},
                           {"min_gpus", e.min_gpus},
                           {"max_gpus", e.max_gpus},
                           {"num_gpus_per_node", e.num_gpus_per_node},
                           {"model_parallel_size", e.model_parallel_size},
                           {"min_time", e.min_time},
                           {"version", e.version},
                           {"prefer_larger_batch", e.prefer_larger_batch},
                           {"ignore_non_elastic_batch_info", e.ignore_non_elastic_batch_info},
                           // ours: the solver's choice (train_batch_size and the others above)
                           {"valid_data_parallel_sizes", c.elastic_valid_data_parallel_sizes}};
  }
  return j.dump(indent);
}

}  // namespace zero
